"""``reconcile --shard I/N`` and ``merge-reports``: the fleet split by namespace, and put
back together.

On examples/ (3 namespaces), 2 shards: llama-demo is shard 0, deepseek-r1 and
qwen3-0-6b shard 1. Each shard's run lists, plans and reports only its own
namespaces; the shards' reports merged are the report of an unsharded run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from omegitops.app.shards import MAX_SHARDS, Shard, bucket
from omegitops.cli import main
from omegitops.cluster.base import INFERENCE_REPLICA
from omegitops.cluster.sim import SimCluster
from omegitops.report.status import content_key, merge_reports
from omegitops.util.errors import UsageError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMESPACES = ("deepseek-r1", "llama-demo", "qwen3-0-6b")


def test_the_hash_is_stable_across_processes_and_versions():
    # A changed hash would move namespaces between shards of a running fleet.
    assert bucket("team-00") == 2469613396711550359
    assert [bucket(n) % 2 for n in NAMESPACES] == [1, 0, 1]


@pytest.mark.parametrize("count", [1, 2, 3, 7, MAX_SHARDS])
def test_each_namespace_is_in_exactly_one_shard(count):
    names = [f"team-{n:02d}" for n in range(200)]
    for name in names:
        assert sum(Shard(i, count).owns(name) for i in range(count)) == 1
    sizes = [sum(Shard(i, count).owns(n) for n in names) for i in range(count)]
    assert min(sizes) > 0 if count <= 7 else True


@pytest.mark.parametrize("text", ["2/2", "0/0", "-1/2", "1", "a/b", f"0/{MAX_SHARDS + 1}"])
def test_a_bad_shard_is_a_usage_error(text):
    with pytest.raises(UsageError, match="--shard"):
        Shard.parse(text)


def _reconcile(cluster: Path, report: Path, *more: str) -> int:
    return main(["reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{cluster}",
                 "--until-idle", "--report-dir", str(report), *more])


def _replica_namespaces(cluster: Path) -> set[str]:
    with SimCluster(cluster) as sim:
        return {r["metadata"]["namespace"] for r in sim.list_objects(INFERENCE_REPLICA)}


def test_shards_reconcile_their_namespaces_and_their_reports_merge_into_the_whole(
        tmp_path, capsys):
    sharded, whole = tmp_path / "sharded.json", tmp_path / "whole.json"
    assert _reconcile(sharded, tmp_path / "reports" / "shard-0", "--shard", "0/2") == 0
    assert _replica_namespaces(sharded) == {"llama-demo"}
    report0 = json.loads((tmp_path / "reports" / "shard-0" / "status.json").read_text())
    assert {s["namespace"] for s in report0["services"]} == {"llama-demo"}
    assert _reconcile(sharded, tmp_path / "reports" / "shard-1", "--shard", "1/2") == 0
    assert _replica_namespaces(sharded) == set(NAMESPACES)
    # Shard 0 again: it sees shard 1's objects nowhere (never orphans, never pruned).
    assert _reconcile(sharded, tmp_path / "reports" / "shard-0", "--shard", "0/2", "--prune") == 0
    assert _replica_namespaces(sharded) == set(NAMESPACES)
    capsys.readouterr()

    # As Argo hands them over: one folder of shard folders, the count checked.
    assert main(["merge-reports", str(tmp_path / "reports"), "--expect", "3",
                 "--report-dir", str(tmp_path / "merged")]) == 1
    assert "2 shard reports found, 3 expected" in capsys.readouterr().err
    assert not (tmp_path / "merged").exists()
    assert main(["merge-reports", str(tmp_path / "reports"), "--expect", "2",
                 "--report-dir", str(tmp_path / "merged")]) == 0
    assert "5 services, 7 components" in capsys.readouterr().out
    assert _reconcile(whole, tmp_path / "whole") == 0
    merged = json.loads((tmp_path / "merged" / "status.json").read_text())
    unsharded = json.loads((tmp_path / "whole" / "status.json").read_text())
    assert content_key(merged) == content_key(unsharded)
    assert (tmp_path / "merged" / "STATUS.md").read_text().startswith("#")


def test_merge_refuses_shards_of_different_commits_and_missing_reports(tmp_path):
    report = {"apiVersion": "v", "kind": "k", "generatedAt": "2026-01-01T00:00:00Z",
              "repository": "r", "revision": "a" * 40, "summary": None, "services": [],
              "unknownReplicas": [], "validationErrors": [], "validationWarnings": []}
    with pytest.raises(ValueError, match="different commits"):
        merge_reports([report, {**report, "revision": "b" * 40}])
    done = subprocess.run([sys.executable, "-m", "omegitops", "merge-reports",
                           str(tmp_path / "nowhere"), "--report-dir", str(tmp_path / "out")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "no shard report there" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_shard_checks_its_own_services_and_the_merge_has_each_error_once(tmp_path, capsys):
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    chat = repo / "services" / "llama-demo" / "llama-chat.yaml"  # shard 0 of 2
    chat.write_text(chat.read_text().replace("minReplicas: 1", "minReplicas: -1"))
    cluster = tmp_path / "cluster.json"
    codes = [main(["reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                   "--shard", f"{i}/2", "--report-dir", str(tmp_path / "reports" / str(i))])
             for i in (0, 1)]
    assert codes == [1, 0]  # only the shard that owns the bad manifest fails
    reports = [json.loads((tmp_path / "reports" / str(i) / "status.json").read_text())
               for i in (0, 1)]
    assert [len(r["validationErrors"]) for r in reports] == [1, 0]
    assert reports[0]["validationErrors"][0]["path"].endswith("llama-chat.yaml")
    assert main(["merge-reports", str(tmp_path / "reports"),
                 "--report-dir", str(tmp_path / "merged")]) == 0
    merged = json.loads((tmp_path / "merged" / "status.json").read_text())
    assert merged["validationErrors"] == reports[0]["validationErrors"]
    assert merged["summary"]["validationErrors"] == 1
    capsys.readouterr()
