"""The benchmark scripts still run: every one at a tiny size, no timing asserted.

The figures themselves come from ``python tests/bench/run.py`` (see README.md,
Benchmarks); this only keeps the scripts from rotting.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
RUN = HERE / "run.py"
BUILD = HERE.parent / "controlplane" / "build.sh"

HEADLINES = ("pass_vs_parse_ratio", "lists_per_pass", "writes_when_converged", "peak_rss_mb",
             "rollout_vs_ideal_ratio", "passes_per_rollout_ratio", "shard_vs_share_ratio")


def run_bounded(argv: list[str], seconds: float) -> subprocess.CompletedProcess:
    """Run ``argv`` in a session of its own; past ``seconds`` the whole session is
    killed, children included, so that nothing it started lives on after the test."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        try:
            out, err = process.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            raise AssertionError(f"{argv[1]} ran over {seconds} s:\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def test_every_benchmark_runs_at_a_tiny_size(tmp_path):
    # The control-plane rollout too, unless those tests are skipped: 4 Instances, one
    # at a time, no minReadySeconds, beside a fleet of 2 services.
    real = ["--no-control-plane"] if os.environ.get("OMEGITOPS_CONTROLPLANE") == "skip" \
        else ["--watch-services", "2", "--watch-min-ready", "0", "--peer-sizes", "2",
              "--peer-trials", "1", "--no-peer-cadence",
              # Two clusters with a real node: minutes, over this test's budget; and four
              # bring-ups, each on a control plane of its own (two, in the test below).
              "--no-install", "--no-bring-up"]
    if "--no-control-plane" not in real:
        # A cold build of the control plane takes about ten minutes: it is made (or
        # waited for, under build.sh's lock) here, with no timeout, so that the
        # benchmark's own limit below measures the benchmark alone.
        subprocess.run(["bash", str(BUILD)], check=True, capture_output=True)
    done = run_bounded(
        [sys.executable, str(RUN), "--services", "5", "--sizes", "5", "--runs", "1",
         "--instances", "4", "--workdir", str(tmp_path), "--scale", "8", *real],
        seconds=600)
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
        peer = document["peer"]["2"]
        assert peer["rollout_ratio"] > 0 and peer["requests_ratio"] > 0
        cluster = document["real_api_server"]
        assert cluster["bump_vs_deployments_ratio"] > 0 and cluster["converged_requests"] > 0


@pytest.mark.controlplane
def test_the_bring_up_benchmark_runs_at_a_tiny_size():
    """``bench_bringup.py``, which ``run.py`` above leaves out: one service, one order
    (five writers, then one), each on a control plane of its own."""
    if os.environ.get("OMEGITOPS_CONTROLPLANE") == "skip":
        pytest.skip("OMEGITOPS_CONTROLPLANE=skip")
    subprocess.run(["bash", str(BUILD)], check=True, capture_output=True)
    done = run_bounded([sys.executable, str(HERE / "bench_bringup.py"), "--services", "1",
                        "--one-order"], seconds=600)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    (order,) = document["runs"].values()
    assert [run["workers"] for run in order] == [5, 1]
    assert all(run["requests"] > 0 and run["seconds"] > 0 for run in order)
    assert document["workers_vs_one_ratio"] > 0

