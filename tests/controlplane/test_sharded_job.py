"""The sharded job on the real API server, as its ServiceAccount: two shards of the
examples, each under its own Lease, run at the same time, then their reports merged.

The sharded WorkflowTemplate (``pipelines/argo/workflowtemplate-sharded.yaml``)
runs exactly these command lines, one pod each.
"""

from __future__ import annotations

import json
import subprocess
import sys

import test_job
from conftest import JOB_NAMESPACE
from test_job import example_namespaces, examples_with_short_windows, run_job

from omegitops.cli import main as cli_main
from omegitops.model.replica import decode_rows
from omegitops.report.status import content_key

# The examples' namespaces and InferenceServices in the API (test_job's fixture).
examples_in_cluster = test_job.examples_in_cluster


def _shard(cp, index: int, repo, tmp_path) -> subprocess.Popen:
    env = cp.env(cp.job_kubeconfig)
    env["OMEGITOPS_NAMESPACE"] = JOB_NAMESPACE
    return subprocess.Popen(
        [sys.executable, "-m", "omegitops", "reconcile", "--repo", str(repo),
         "--cluster", "kube", "--until-idle", "--max-seconds", "300",
         "--shard", f"{index}/2", "--report-dir", str(tmp_path / "reports" / f"shard-{index}")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_shards_run_at_once_each_under_its_lease_and_merge(examples_in_cluster, tmp_path):
    cp = examples_in_cluster
    repo = examples_with_short_windows(tmp_path)
    runs = [_shard(cp, index, repo, tmp_path) for index in (0, 1)]
    outcomes = [run.communicate(timeout=400) for run in runs]
    logs = "\n".join(err[-1500:] for _, err in outcomes)
    for run, (_, err) in zip(runs, outcomes, strict=True):
        assert run.returncode == 0, err[-3000:]
        assert "not running" not in err, err[-2000:]  # neither waited for the other's Lease
    for index in (0, 1):
        lease = cp.get("coordination.k8s.io/v1", "Lease", JOB_NAMESPACE,
                       f"omegitops-shard-{index}")
        assert lease is not None
        assert not lease["spec"].get("holderIdentity")  # released at exit
    replicas = cp.list("ome.io/v1beta1", "InferenceReplica")
    assert {r["metadata"]["namespace"] for r in replicas} == set(example_namespaces())
    unready = {r["metadata"]["name"]: (
        [(row["index"], row["phase"], (row.get("operation") or {}).get("step"),
          (row.get("operation") or {}).get("waiting"), row.get("lastFailure"))
         for row in decode_rows(r["status"].get("instances"))],
        [(c["type"], c["status"], c.get("message"))
         for c in r["status"].get("conditions", []) if c["status"] != "False"])
        for r in replicas if r["status"]["readyReplicas"] != r["spec"]["replicas"]}
    if unready:
        pods = [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"),
                 [(c["type"], c["status"], c.get("reason")) for c in
                  p["status"].get("conditions") or []])
                for namespace in example_namespaces() for p in cp.list("v1", "Pod", namespace)]
        nodes = [(n["metadata"]["name"], [t["key"] for t in n["spec"].get("taints") or []],
                  n["status"].get("allocatable", {}).get("nvidia.com/gpu"))
                 for n in cp.list("v1", "Node")]
        raise AssertionError(f"not ready: {unready}\npods: {pods}\nnodes: {nodes}\n{logs}")

    assert cli_main(["merge-reports", str(tmp_path / "reports"), "--expect", "2",
                     "--report-dir", str(tmp_path / "merged")]) == 0
    whole = run_job(cp, ["omegitops", "reconcile", "--repo", str(repo), "--cluster", "kube",
                         "--report-dir", str(tmp_path / "whole")], tmp_path)
    assert whole.returncode == 0, whole.stderr[-3000:]
    merged = json.loads((tmp_path / "merged" / "status.json").read_text())
    unsharded = json.loads((tmp_path / "whole" / "status.json").read_text())
    assert content_key(merged) == content_key(unsharded)
