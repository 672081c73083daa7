"""The simulated-cluster part of docs/getting-started.md, run as a reader would: every
command of its shell blocks, in order, in a copy of ``examples/``, each succeeding, and
what the text says each shows there."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from tests.conftest import EXAMPLES

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"
ROOT = Path(__file__).resolve().parents[2]


def simulated_part() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    return text[text.index("## On the simulated cluster"):text.index("## On a real cluster")]


def commands(section: str) -> list[str]:
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line:
                lines.append(line)
    return lines


def omegitops_on_path(folder: Path) -> dict[str, str]:
    """An environment where ``omegitops`` is this checkout's, run by this Python."""
    shim = folder / "bin" / "omegitops"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m omegitops "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PATH=f"{shim.parent}:{os.environ['PATH']}")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def test_the_simulated_walkthrough_runs_as_written(tmp_path):
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    env = omegitops_on_path(tmp_path)
    shown: dict[str, str] = {}
    steps = commands(simulated_part())
    assert len(steps) >= 10, steps
    for command in steps:
        done = subprocess.run(["bash", "-c", command], check=False, cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
        shown[command] = done.stdout
    by_start = {c.split(" --")[0]: out for c, out in shown.items()}
    # The rollout of the new image moved qwen3's Instances, as the events say.
    assert "v0.5.6" in (tmp_path / "examples/runtimes/srt-qwen3-0-6b.yaml").read_text()
    assert "InstanceUpdated" in shown["omegitops events -n qwen3-0-6b"]
    # The fault: the worker's restart rebuilt the gang as a new incarnation.
    restarts = by_start["omegitops events -n deepseek-r1"]
    assert "RestartTriggered" in restarts and "deepseek-r1-engine-0-worker-0" in restarts
    status = shown["omegitops instance status deepseek-r1 0 -n deepseek-r1"]
    assert re.search(r"Incarnation:\s+2", status) and re.search(r"Phase:\s+Ready", status)
    assert "deepseek-r1-engine-0-worker-0" in shown["omegitops sim show"]


def test_the_helm_way_leaves_the_namespace_to_step_one():
    """Step 1 makes the namespace (for the Secret); ``helm install`` then refuses a
    chart that makes it again ("invalid ownership metadata", seen on the real control
    plane by tests/bench/bench_install.py), and needs the namespace to keep its release
    record in. So the guide's Helm way says ``namespace.create=false``."""
    text = GUIDE.read_text(encoding="utf-8")
    cluster = text[text.index("## On a real cluster"):]
    assert "kubectl create namespace omegitops" in cluster
    prose = re.sub(r"```.*?```", "", cluster, flags=re.DOTALL)
    (helm,) = [" ".join(c.split()) for c in re.findall(r"`([^`]+)`", prose)
               if c.startswith("helm install ")]
    assert "--set namespace.create=false" in helm, helm
