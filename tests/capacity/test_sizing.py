"""A simulated cluster sized to a repository: the node pools a forecast runs on."""

from __future__ import annotations

import tempfile
from pathlib import Path

from omegitops.capacity.sizing import NodePool, selected_labels, size_for
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.cluster.sim import SimCluster
from omegitops.manifests.load import load, resolved_components
from omegitops.preview.fleetsize import peak_instances, peak_pods, sized_pools
from tests.fleet import TOLERATIONS, strategy, write_service


def pod(gpus: int = 1, cpu: str = "4", selector: dict | None = None,
        affinity: list[dict] | None = None, tolerate: bool = True) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "i", "resources": {
        "limits": {"nvidia.com/gpu": gpus} if gpus else {}, "requests": {"cpu": cpu}}}]}
    if selector:
        spec["nodeSelector"] = selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": affinity}]}}}
    if tolerate:
        spec["tolerations"] = TOLERATIONS
    return {"spec": spec}


def test_labels_meet_a_node_selector_and_the_first_required_term():
    p = pod(selector={"pool": "h100"}, affinity=[
        {"key": "node.kubernetes.io/instance-type", "operator": "In",
         "values": ["BM.GPU.H100.8", "BM.GPU.H200.8"]},
        {"key": "gpu", "operator": "Exists"},
        {"key": "zone", "operator": "NotIn", "values": ["a"]},
        {"key": "generation", "operator": "Gt", "values": ["3"]},
        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-1"]}])
    assert selected_labels(p) == {"pool": "h100", "node.kubernetes.io/instance-type":
                                  "BM.GPU.H100.8", "gpu": "true", "generation": "4"}


def test_pools_pack_by_gpus_and_keep_selected_pods_apart():
    pods = [pod(8)] * 3 + [pod(1)] * 9 + [pod(2, selector={"pool": "a"})] * 5 + [pod(0)] * 2
    pools = {(tuple(sorted(p.labels.items())), p.gpus): p for p in size_for(pods)}
    # 3 x 8 GPUs + 9 x 1 GPU = 33 GPUs: 5 nodes of 8, and a spare.
    assert pools[((), 8)].nodes == 6 and pools[((), 8)].tainted
    assert pools[((("pool", "a"),), 8)].nodes == 3  # 10 GPUs: 2 nodes, and a spare
    assert pools[((), 0)] == NodePool(2, 0, {}, False)  # CPU pods: one node, and a spare


def test_a_pod_bigger_than_a_default_node_gets_a_node_that_holds_it():
    (pool,) = size_for([pod(16)])
    assert pool.gpus == 16


def test_gpu_pods_that_do_not_tolerate_the_taint_get_an_untainted_pool():
    (pool,) = size_for([pod(1, tolerate=False)])
    assert not pool.tainted


def test_peak_counts_the_surge_a_budget_allows(tmp_path):
    write_service(tmp_path / "a", replicas=4, workers=1,
                  lifecycle=strategy("SurgeThenDrain", maxSurge=1))
    (item,) = resolved_components(load(tmp_path / "a"))
    assert peak_instances(item) == 5
    assert len(peak_pods([item])) == 10  # a leader and a worker each
    write_service(tmp_path / "b", replicas=4, lifecycle=strategy("RecreatePod"))
    (item,) = resolved_components(load(tmp_path / "b"))
    assert peak_instances(item) == 4


def _forecast(items, pools):
    from omegitops.preview.forecast import forecast

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "c.json"
        SimCluster.init(path, pools=pools)
        with SimCluster(path) as sim:
            return forecast(sim, items, 3600)


def test_a_runtime_of_the_real_catalogue_that_requires_an_instance_type_comes_up(tmp_path):
    """OME's gpt-oss-20b runtime requires node.kubernetes.io/instance-type; the default
    simulated nodes have none, so a forecast there fails what a real cluster runs."""
    # Left as found: the runtime's top-level affinity and tolerations (ServingRuntime
    # pod fields) are not yet rendered into pods; here the engine carries them.
    shared = Path(__file__).resolve().parents[3] / "shared" / "ome"
    if not shared.is_dir():
        import pytest

        pytest.skip("../shared/ome is not here")
    import yaml

    (tmp_path / "runtimes").mkdir()
    (tmp_path / "services").mkdir()
    runtime = yaml.safe_load((shared / "runtimes/srt/gpt-oss-20b-rt.yaml").read_text())
    # The runtime's affinity, as its engine's own (the pod template renders engineConfig).
    runtime["spec"]["engineConfig"]["affinity"] = runtime["spec"].pop("affinity")
    (tmp_path / "runtimes/gpt-oss-20b-rt.yaml").write_text(yaml.safe_dump(runtime))
    service = yaml.safe_load((shared / "isvc/openai/gpt-oss-20b.yaml").read_text())
    service["metadata"]["annotations"] = {}
    service["spec"]["deploymentMode"] = "OMENative"
    service["spec"]["runtime"] = {"name": "srt-gpt-oss-20b-grpc"}  # OMENative names it
    service["spec"]["engine"].update(minReplicas=3, maxReplicas=3)
    (tmp_path / "services/gpt-oss-20b.yaml").write_text(yaml.safe_dump(service))
    items = [i for i in resolved_components(load(tmp_path)) if i.lifecycle.managed]
    assert len(items) == 1
    pools = sized_pools(items)
    assert any(p.labels.get("node.kubernetes.io/instance-type") == "BM.GPU.A100-v2.8"
               for p in pools)
    sized = _forecast(items, pools)
    assert sized["idle"] and not sized["failedOperations"], sized["errors"]
    assert sized["lowestCapacity"][0]["end"] == "3/3"
    default = _forecast(items, None)
    assert default["lowestCapacity"][0]["end"] != "3/3"  # what the sizing is for


def test_reconcile_on_a_new_simulated_cluster_sizes_it_to_the_repository(cli, tmp_path):
    """`reconcile` makes a missing `sim:` cluster as `plan` makes the one it forecasts
    on, sized to the repository: ten services of four gangs (a leader and a worker of one
    GPU each) need 80 GPUs where the eight default nodes hold 64, and every Instance
    comes up."""
    repo = tmp_path / "repo"
    for index in range(10):
        write_service(repo, name=f"svc-{index}", replicas=4, workers=1)
    cluster = tmp_path / "cluster.json"
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                       "--until-idle", "--max-seconds", "3600")
    assert code == 0, err
    assert "a new simulated cluster sized to fit the repository" in err
    with SimCluster(cluster) as sim:
        replicas = sim.list_objects(INFERENCE_REPLICA)
    assert len(replicas) == 10
    for replica in replicas:
        assert replica["status"]["readyReplicas"] == 4, replica["status"].get("conditions")
    # An existing cluster is taken as it is.
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}")
    assert code == 0 and "sized to fit" not in err
