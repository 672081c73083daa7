"""Pods the API server refuses are refused by ``validate`` too, with the server's rule:
the cases the control plane holds to a server-side dry run one by one
(``tests/controlplane/test_api_server_rendering.py``), checked here through the command line."""

from __future__ import annotations

import copy
import re

import pytest
import yaml

from tests.conftest import RUNTIME, SERVICE, write_repo

# (what the service's engine sets, a piece of validate's message)
CASES = {
    "requests over limits": ({"runner": {"resources": {
        "requests": {"cpu": "4"}, "limits": {"cpu": "2", "nvidia.com/gpu": 1}}}},
        "must be less than or equal to cpu limit"),
    "gpu requests not equal to limits": ({"runner": {"resources": {
        "requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}}},
        "must be equal to nvidia.com/gpu limit"),
    "fractional gpu": ({"runner": {"resources": {"limits": {"nvidia.com/gpu": "500m"}}}},
                       "nvidia.com/gpu must be a whole number"),
    "negative request": ({"runner": {"resources": {"requests": {"memory": "-1Gi"},
                                                   "limits": {"nvidia.com/gpu": 1}}}},
                         "must be greater than or equal to 0"),
    "port out of range": ({"runner": {"ports": [{"containerPort": 70000}]}},
                          "must be between 1 and 65535"),
    "image with spaces": ({"runner": {"image": " docker.io/lmsysorg/sglang:v0.5.5 "}},
                          "must not have leading or trailing whitespace"),
    "env name with =": ({"runner": {"env": [{"name": "A=B", "value": "1"}]}},
                        "must not contain '='"),
    "node selector value too long": ({"nodeSelector": {"pool": "x" * 64}},
                                     "node selector a label value"),
    "annotations over 256 KiB": ({"annotations": {"big": "x" * (256 * 1024)}},
                                 "may not be more than 262144 bytes"),
}


def service_with(engine: dict) -> str:
    data = yaml.safe_load(SERVICE)
    merged = copy.deepcopy(data["spec"]["engine"])
    for key, value in engine.items():
        merged[key] = value
    data["spec"]["engine"] = merged
    return yaml.safe_dump(data)


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_refuses_what_the_api_server_refuses(tmp_path, cli, case):
    engine, said = CASES[case]
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME, "svc.yaml": service_with(engine)})
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1, out + err
    assert said in out + err and "the API server refuses them" in out + err, out + err


@pytest.mark.parametrize("case", sorted(CASES))
def test_sim_refuses_at_create_what_the_api_server_refuses(tmp_path, case):
    """``sim:`` refuses the same pods when they are created, as the API server does, so a
    forecast never runs Ready what a cluster would refuse on every pass."""
    from omegitops.cluster.errors import Invalid
    from omegitops.cluster.sim import SimCluster
    from tests.cluster.sim_helpers import make_pod

    engine, said = CASES[case]
    pod = make_pod("refused")
    container = pod["spec"]["containers"][0]
    for key, value in (engine.get("runner") or {}).items():
        container[key] = {**container.get(key, {}), **value} if key == "resources" else value
    pod["spec"].update({k: v for k, v in engine.items() if k == "nodeSelector"})
    pod["metadata"]["annotations"].update(engine.get("annotations") or {})
    SimCluster.init(tmp_path / "c.json")
    with SimCluster(tmp_path / "c.json") as sim:
        with pytest.raises(Invalid, match=re.escape(said)):
            sim.create_pod(pod)
        assert sim.list_pods() == []
