"""The cluster file: lock, atomic save, refusing corrupt state, the factory."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from sim_helpers import NS, make_pod

from omegitops.cluster import open_cluster
from omegitops.cluster.errors import LockHeld
from omegitops.cluster.sim import SimCluster
from omegitops.util.errors import ClusterError, UsageError


def test_missing_file_is_a_fresh_cluster_with_default_nodes(tmp_path):
    path = tmp_path / "deep" / "dir" / "cluster.json"
    with SimCluster(path) as sim:
        nodes = sim.list_objects("Node")
        assert sim.now().isoformat() == "2026-09-27T08:00:00+00:00"
    assert [n["metadata"]["name"] for n in nodes] == [f"node-{i}" for i in range(10)]
    assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    # Two untainted CPU nodes follow the GPU nodes, for routers and the like.
    assert nodes[8]["spec"]["taints"] == []
    assert nodes[8]["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    assert nodes[0]["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert json.loads(path.read_text())["version"] == 1


def test_second_opener_in_the_same_process_is_refused_with_the_holder_pid(tmp_path):
    path = tmp_path / "cluster.json"
    holder = rf"cluster.json.lock.*pid {os.getpid()}"
    with SimCluster(path), pytest.raises(LockHeld, match=holder), SimCluster(path):
        pass
    with SimCluster(path):  # released on exit
        pass


def test_second_opener_in_another_process_is_refused(tmp_path):
    path = tmp_path / "cluster.json"
    code = (
        "import sys\nfrom omegitops.cluster.sim import SimCluster\n"
        "try:\n    SimCluster(sys.argv[1]).__enter__()\n"
        "except Exception as e:\n    print(e); sys.exit(3)\n"
    )
    with SimCluster(path):
        done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                              text=True, check=False)
    assert done.returncode == 3
    assert f"pid {os.getpid()}" in done.stdout


def test_an_exception_in_the_block_leaves_the_file_unchanged(tmp_path):
    path = tmp_path / "cluster.json"
    with SimCluster(path) as sim:
        sim.create_pod(make_pod("kept"))
    before = path.read_bytes()
    with pytest.raises(RuntimeError), SimCluster(path) as sim:
        sim.create_pod(make_pod("lost"))
        sim.advance(100)
        raise RuntimeError("pass failed")
    assert path.read_bytes() == before


def test_a_failed_save_leaves_no_partial_or_temporary_file(tmp_path):
    path = tmp_path / "cluster.json"
    with SimCluster(path):
        pass
    before = path.read_bytes()
    with pytest.raises(TypeError), SimCluster(path) as sim:
        sim._state["objects"]["Pod"]["x"] = {"metadata": {"bad": {1, 2}}}  # not JSON
        sim.save()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json", "cluster.json.lock"]


@pytest.mark.parametrize(("content", "reason"), [
    (b"{not json", "invalid JSON: Expecting property name enclosed in double quotes"),
    (b'{"a": "\xff"}', "invalid JSON: 'utf-8' codec can't decode byte 0xff"),
    (b"[1, 2]", "top level is not an object"),
    (b'{"version": 7}', "unsupported version 7"),
])
def test_a_corrupt_file_is_reported_and_left_byte_identical(tmp_path, content, reason):
    path = tmp_path / "cluster.json"
    path.write_bytes(content)
    with pytest.raises(ClusterError, match="not a valid simulated cluster state") as err, \
            SimCluster(path):
        pass
    assert reason in str(err.value)
    assert "refusing to overwrite it" in str(err.value)
    assert path.read_bytes() == content


def test_state_survives_save_and_load_and_time_goes_on_identically(tmp_path):
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    for path in (one, two):
        with SimCluster(path) as sim:
            sim.create_pod(make_pod("a"))
            sim.advance(10)
    with SimCluster(one) as sim:
        sim.advance(30)
        reloaded = sim.get_object("Pod", NS, "a")
    with SimCluster(two) as sim:  # the same 40 s, in one go after a reload
        sim.advance(30)
        assert sim.get_object("Pod", NS, "a") == reloaded
    assert reloaded["status"]["phase"] == "Running"


def test_a_state_holding_an_integer_past_64_bits_keeps_it_across_saves(tmp_path):
    """orjson writes and reads the state, but takes no integer past 64 bits (and would
    read one as a float): such a state is written by the standard library, marked, and
    read back by it, the integer whole."""
    path = tmp_path / "cluster.json"
    big = 2**70
    with SimCluster(path) as sim:
        pod = make_pod("a")
        pod["spec"]["terminationGracePeriodSeconds"] = big
        sim.create_pod(pod)
    for _ in range(2):  # read and saved again: still the standard library's, still whole
        assert path.read_bytes().startswith(b' {"')
        with SimCluster(path) as sim:
            assert sim.get_object("Pod", NS, "a")["spec"]["terminationGracePeriodSeconds"] == big


def test_a_state_edited_by_hand_with_what_orjson_refuses_still_opens(tmp_path):
    path = tmp_path / "cluster.json"
    with SimCluster(path) as sim:
        sim.create_pod(make_pod("a"))
    data = json.loads(path.read_text())
    data["settings"]["pullSeconds"] = float("nan")  # written NaN, which orjson refuses
    path.write_text(json.dumps(data))
    with SimCluster(path) as sim:
        assert sim.get_object("Pod", NS, "a")["metadata"]["name"] == "a"


def test_init_configures_nodes_gpus_and_podgroups(tmp_path):
    path = tmp_path / "c.json"
    SimCluster.init(path, nodes=3, gpus_per_node=4, podgroups=True, cpu_nodes=0)
    with SimCluster(path) as sim:
        assert len(sim.list_objects("Node")) == 3
        assert sim.list_objects("Node")[0]["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        assert sim.has_kind("PodGroup")
    with SimCluster(tmp_path / "other.json") as sim:
        assert not sim.has_kind("PodGroup")


def test_open_cluster_parses_the_cluster_spec(tmp_path):
    with open_cluster(f"sim:{tmp_path / 'c.json'}") as sim:
        assert isinstance(sim, SimCluster)
    with pytest.raises(ClusterError, match="kube:prod"):
        open_cluster("kube:prod")
    with pytest.raises(UsageError):
        open_cluster("etcd://x")


def test_a_pod_entry_without_metadata_is_a_one_line_error(tmp_path, cli):
    """A hand-edited state file with a broken object: the error names it, no traceback."""
    path = tmp_path / "cluster.json"
    SimCluster.init(path)
    state = json.loads(path.read_text())
    state["objects"].setdefault("Pod", {})["demo/broken"] = {"spec": {}}
    path.write_text(json.dumps(state))
    code, _, err = cli("get", "irep", "--cluster", f"sim:{path}")
    assert code == 1
    assert err.strip() == (f"omegitops: error: {path}: not a valid simulated cluster state "
                           "(Pod 'demo/broken' has no metadata.name); refusing to overwrite it")
