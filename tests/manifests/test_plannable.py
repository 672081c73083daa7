"""What ``validate`` accepts, the planner plans; what the planner trips on stays one
component's error.

Two rules: values are checked once, at load, against what the planner does
with them (``omegitops/manifests/plannable.py``), and a property test holds the
two to the same answers on generated values; and each component is planned in
its own error boundary, so that a bug or a value that slipped through names its
component and the rest of the pass goes on.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import omegitops.app.passes as reconcile_module
from omegitops.app.passes import Pruning, run_pass
from omegitops.app.untilidle import run_until_idle
from omegitops.cluster.sim import SimCluster
from omegitops.manifests.load import load, resolved_components
from omegitops.manifests.plannable import MAX_CLUSTER_PODS
from omegitops.manifests.repository import read_repository
from omegitops.manifests.yamlfile import MAX_FILE_BYTES
from tests.conftest import RUNTIME, SERVICE, write_repo
from tests.fleet import write_service

EXAMPLES = int(os.environ.get("OMEGITOPS_PROPERTY_EXAMPLES", "25"))


def two_services(root: Path) -> Path:
    return write_repo(root, {"runtime.yaml": RUNTIME, "small.yaml": SERVICE,
                             "other.yaml": SERVICE.replace("name: small\n", "name: other\n")})


def fail_planning_of(monkeypatch, name: str) -> None:
    """The planner raises for one service, as a bug or a value validation missed would."""
    real = reconcile_module.build_desired

    def build(isvc, *args, **kwargs):
        if isvc["metadata"]["name"] == name:
            raise OverflowError("date value out of range")
        return real(isvc, *args, **kwargs)

    monkeypatch.setattr(reconcile_module, "build_desired", build)


# -- one component's error boundary ------------------------------------------------------


def test_a_component_that_cannot_be_planned_is_named_and_the_others_reconcile(
        tmp_path, cli, monkeypatch):
    repo = two_services(tmp_path / "repo")
    fail_planning_of(monkeypatch, "small")
    cluster = tmp_path / "c.json"
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}")
    assert code == 1 and "Traceback" not in err
    assert ("error: small.yaml: demo/small engine: not planned, OverflowError: date value "
            "out of range") in err
    replicas = json.loads(cluster.read_text())["objects"]["InferenceReplica"]
    assert set(replicas) == {"demo/other-engine"}


def test_plan_names_the_component_and_plans_the_others(tmp_path, cli, monkeypatch):
    repo = two_services(tmp_path / "repo")
    fail_planning_of(monkeypatch, "small")
    code, out, err = cli("plan", "--repo", str(repo), "-o", "json", "--no-forecast")
    assert code == 1 and "Traceback" not in err
    document = json.loads(out)
    assert [c["service"] for c in document["components"]] == ["demo/other"]
    (error,) = document["planningErrors"]
    assert "demo/small engine: not planned, OverflowError" in error
    assert "1 component not planned" in document["summary"]["text"]
    code, out, _ = cli("plan", "--repo", str(repo), "--no-forecast")
    assert "### Planning errors" in out and "demo/small engine: not planned" in out


def test_a_component_that_cannot_be_planned_is_never_pruned(tmp_path, monkeypatch):
    repo = two_services(tmp_path / "repo")
    SimCluster.init(tmp_path / "c.json")
    with SimCluster(tmp_path / "c.json") as sim:
        items = resolved_components(load(repo))
        run_pass(sim, items)
        fail_planning_of(monkeypatch, "small")
        result = run_pass(sim, items, Pruning())
        assert len(result.errors) == 1
        assert {r["metadata"]["name"] for r in sim.list_objects("InferenceReplica")} == {
            "small-engine", "other-engine"}
        assert [p for p in sim.list_pods() if p["metadata"]["name"].startswith("small-")]


# -- values checked at load against what the planner does with them ---------------------


def test_whole_floats_are_read_as_the_integers_they_validate_as(tmp_path):
    repo = write_repo(tmp_path, {"runtime.yaml": RUNTIME, "small.yaml": SERVICE.replace(
        "minReplicas: 2", "minReplicas: 2.0").replace("maxReplicas: 2", "maxReplicas: 2.0")})
    loaded = load(repo)
    assert loaded.result.ok, loaded.result.errors
    (item,) = resolved_components(loaded)
    assert item.lifecycle.replicas == 2  # read as 1 before


def test_a_gang_too_big_for_any_cluster_is_refused_at_zero_replicas_too(tmp_path):
    """Found by the property below: minReplicas 0 with a worker count of 2**40 passed
    the pod bound (0 Instances need no pods), then building the names of one Instance
    ran validation out of memory."""
    repo = write_service(tmp_path / "repo", replicas=0, workers=2**40)
    result = load(repo).result
    (error,) = result.errors
    assert "1 Instance of 1099511627777 pods needs 1099511627777 pods" in error.message
    assert f"at most {MAX_CLUSTER_PODS} pods" in error.message


def test_two_thousand_copies_validate_quickly_with_short_messages(tmp_path):
    text = SERVICE.lstrip("\n")
    files = {"runtime.yaml": RUNTIME, **{f"copies/{i}.yaml": text for i in range(2000)}}
    repo = write_repo(tmp_path, files)
    started = time.monotonic()
    result = load(repo).result
    assert time.monotonic() - started < 10
    assert len(result.errors) == 2000
    assert all(len(e.message) < 150 for e in result.errors), result.errors[0].message
    assert result.errors[0].message.endswith("and 1996 more")


def test_a_huge_manifest_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "repo" / "big.yaml"
    big.parent.mkdir()
    with big.open("wb") as handle:  # sparse: a gigabyte that costs no disk
        handle.truncate(1 << 30)
    tracemalloc.start()
    try:
        repo = read_repository(big.parent)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    (error,) = repo.errors
    assert f"larger than the limit of {MAX_FILE_BYTES}" in error.message
    assert peak < 2 * MAX_FILE_BYTES


def test_an_unreadable_values_file_is_one_line(tmp_path, cli, monkeypatch):
    repo = write_repo(tmp_path, {"runtime.yaml": RUNTIME, "small.yaml": SERVICE,
                                 "ome-values.yaml": "ome: {}\n"})
    import omegitops.manifests.operator_values as values

    def refuse(path, *args):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(values, "read_limited", refuse)
    code, out, err = cli("validate", "--repo", str(repo))
    assert (code, out) == (1, "")
    assert err == "omegitops: error: ome-values.yaml: cannot read: Permission denied\n"


# -- the property: every document validation accepts plans -------------------------------


def _int_like():
    """What YAML makes of numbers people write: small, huge, negative, whole floats."""
    return st.one_of(st.integers(-3, 5), st.integers(0, 2**70), st.sampled_from(
        [2**31 - 1, 2**31, 2**63, 1.0, 2.0, 1e3, 1.5, -1.0]))


def _duration():
    units = st.sampled_from(["ns", "s", "m", "h"])
    amount = st.one_of(st.integers(0, 120), st.integers(0, 10**12))
    return st.one_of(st.builds(lambda n, u: f"{n}{u}", amount, units),
                     st.sampled_from(["0", "1h30m", "2562047h47m16s", "2562047h47m17s"]))


def _budget():
    return st.one_of(_int_like(), st.builds(lambda n: f"{n}%", st.integers(0, 150)))


@st.composite
def lifecycles(draw):
    strategy = draw(st.sampled_from(["SurgeThenDrain", "RecreatePod", "InPlaceIfPossible"]))
    rolling = {key: draw(_budget()) for key in ("maxSurge", "maxUnavailable")
               if draw(st.booleans())}
    if draw(st.booleans()):
        rolling["partition"] = draw(_int_like())
    lifecycle = {"updateStrategy": {"type": strategy, "rollingUpdate": rolling}}
    if draw(st.booleans()):
        lifecycle["minReadySeconds"] = draw(_int_like())
    if draw(st.booleans()):
        lifecycle["instanceReadyTimeout"] = draw(_duration())
    # Counts stay small when valid (planning 150,000 Instances is no exception, only slow).
    return {"lifecycle": lifecycle, "replicas": draw(_count()),
            "workers": draw(st.one_of(st.none(), _count()))}


def _count():
    return st.one_of(st.integers(-2, 3), st.sampled_from(
        [1.0, 2.0, -1.0, 2.5, MAX_CLUSTER_PODS + 1, 2**40, 2**63]))


# Derandomized, as the other property tests: CI runs the same documents every time
# (OMEGITOPS_PROPERTY_EXAMPLES raises the count to explore).
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(lifecycles())
def test_every_document_validation_accepts_plans_until_ready(fleet):
    """Written as YAML and read back as the CLI does; whatever validation accepts is
    planned pass after pass, past the pods turning Ready and their minReadySeconds
    window (where an overflow used to wait), without an exception."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_service(Path(tmp) / "repo", replicas=fleet["replicas"],
                             workers=fleet["workers"], lifecycle=fleet["lifecycle"])
        loaded = load(repo)
        event("accepted" if loaded.result.ok else "refused")
        if not loaded.result.ok:
            return
        items = resolved_components(loaded)
        SimCluster.init(Path(tmp) / "c.json")
        with SimCluster(Path(tmp) / "c.json") as sim:
            # Only the errors are kept: a run of thousands of passes must not hold them all.
            errors: list[str] = []
            run_until_idle(sim, items, 900, lambda result: errors.extend(result.errors))
            sim.advance(timedelta(days=1).total_seconds())
            errors.extend(run_pass(sim, items).errors)
        assert not errors, (yaml.safe_dump(fleet), errors)
