"""A signal at any moment of a run keeps what was applied and says so.

SIGTERM (a CronJob pod's termination) or SIGINT can arrive while the repository
is read, during a pass, while the simulated cluster is saved or while the report is
written. Whenever it comes: no traceback, exit 128 + the signal (or 0 when the run
had already finished), the cluster file whole, and either no report and nothing
applied (a signal before the first pass) or a report that agrees with the cluster.
The moments are drawn at random over the length of an uninterrupted run, counted from
the moment the program's entry point catches SIGINT and SIGTERM (read from
``/proc/PID/status``: the interpreter's own start-up comes before any code of ours
runs), with a fixed seed, so a failure can be replayed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from omegitops.model.replica import decode_rows

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SEED = 20261204
MOMENTS = 24


def _command(repo: Path, state: Path, report: Path) -> list[str]:
    return [sys.executable, "-m", "omegitops", "reconcile", "--repo", str(repo), "--cluster",
            f"sim:{state}", "--until-idle", "--report-dir", str(report)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def rollout(tmp_path_factory) -> tuple[Path, Path, float]:
    """A running fleet (its cluster file) and a repository whose every runtime has a new
    image, so that a run has a rollout to do; and how long that run takes whole."""
    base = tmp_path_factory.mktemp("base")
    state = base / "running.json"
    done = subprocess.run(_command(EXAMPLES, state, base / "first"), env=_env(), check=False,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    repo = base / "repo"
    shutil.copytree(EXAMPLES, repo)
    for runtime in (repo / "runtimes").glob("*.yaml"):
        text = runtime.read_text()
        runtime.write_text(text.replace("image: ", "image: mirror.example/", 1))
    scratch = base / "whole"
    scratch.mkdir()
    shutil.copy(state, scratch / "c.json")
    started = time.monotonic()
    done = subprocess.run(_command(repo, scratch / "c.json", scratch / "report"), env=_env(),
                          check=False,
                          capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    return state, repo, took


def _wait_until_caught(run: subprocess.Popen) -> None:
    """Until the program catches SIGINT and SIGTERM (or has ended)."""
    wanted = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    deadline = time.monotonic() + 60
    while run.poll() is None and time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{run.pid}/status").read_text()
        except OSError:
            return
        caught = next(int(line.split()[1], 16) for line in status.splitlines()
                      if line.startswith("SigCgt:"))
        if caught & wanted == wanted:
            return
        time.sleep(0.001)


def _replicas(state: Path) -> dict[str, list[tuple]]:
    objects = json.loads(state.read_text())["objects"].get("InferenceReplica", {})
    return {obj["metadata"]["name"]: _rows(obj["status"].get("instances"))
            for obj in objects.values()}


def _rows(stored) -> list[tuple]:
    return sorted((row["index"], row["phase"], row.get("revision"),
                   json.dumps(row.get("operation"), sort_keys=True))
                  for row in decode_rows(stored or []))


def _reported(report: Path) -> dict[str, list[tuple]]:
    written = json.loads((report / "status.json").read_text())
    return {component["inferenceReplica"]: _rows(component["state"]["instances"])
            for service in written["services"] for component in service["components"]
            if component.get("found")}


@pytest.mark.parametrize("moment", range(MOMENTS))
def test_a_signal_at_a_random_moment_keeps_what_was_applied(rollout, tmp_path, moment):
    state0, repo, took = rollout
    draw = random.Random(SEED + moment)
    signum = draw.choice([signal.SIGTERM, signal.SIGINT])
    delay = draw.uniform(0.0, took * 1.1)
    state, report = tmp_path / "c.json", tmp_path / "report"
    shutil.copy(state0, state)
    before = state.read_bytes()
    run = subprocess.Popen(_command(repo, state, report), env=_env(), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_until_caught(run)
    time.sleep(delay)
    if run.poll() is None:
        run.send_signal(signum)
    _, err = run.communicate(timeout=600)
    where = f"{signal.Signals(signum).name} after {delay:.2f}s of {took:.2f}s"
    assert "Traceback" not in err, f"{where}:\n{err[-3000:]}"
    assert run.returncode in (0, 128 + signum), f"{where}: exit {run.returncode}\n{err[-3000:]}"
    saved = _replicas(state)  # the cluster file is whole: it parses
    if not (report / "status.json").exists():
        # Stopped before the first pass: nothing was applied.
        assert run.returncode == 128 + signum, where
        assert state.read_bytes() == before, where
        return
    assert _reported(report) == {name: rows for name, rows in saved.items()
                                 if name in _reported(report)}, where
