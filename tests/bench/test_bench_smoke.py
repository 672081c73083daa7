"""The benchmark scripts still run: every one at a tiny size, no timing asserted.

The figures themselves come from ``python tests/bench/run.py`` (see README.md,
Benchmarks); this only keeps the scripts from rotting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parent / "run.py"
HEADLINES = ("pass_vs_parse_ratio", "lists_per_pass", "writes_when_converged", "peak_rss_mb",
             "rollout_vs_ideal_ratio", "passes_per_rollout_ratio", "shard_vs_share_ratio")


def test_every_benchmark_runs_at_a_tiny_size(tmp_path):
    # The control-plane rollout too, unless those tests are skipped: 4 Instances, one
    # at a time, no minReadySeconds, beside a fleet of 2 services.
    real = ["--no-control-plane"] if os.environ.get("OMEGITOPS_CONTROLPLANE") == "skip" \
        else ["--watch-services", "2", "--watch-min-ready", "0"]
    done = subprocess.run(
        [sys.executable, str(RUN), "--services", "5", "--sizes", "5", "--runs", "1",
         "--instances", "4", "--workdir", str(tmp_path), "--scale", "8", *real],
        check=False, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    for key in HEADLINES:
        assert key in document, key
    assert document["fleet"]["services"] == 5
    assert set(document["peak_rss_mb"]) == {"5", "8"}
    assert document["per_service_cost_ratio"] > 0
    assert document["writes_when_converged"] == {"5": 0}
    assert document["writes_equal_actions"] is True
    assert document["details"]["rollout"]["instances"] == 4
    if "--no-control-plane" not in real:
        assert document["rollout_vs_ideal_ratio_real"] > 0
        assert document["api_bytes_per_rollout_ratio"] >= 1
