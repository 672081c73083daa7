"""The command line in surroundings that break a naive program: little memory, an
output that cannot take what is written, odd environment variables and arguments.
Each ends in one line on stderr and an exit code, never a traceback. The program runs
in a process of its own, as a pipeline runs it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO_ROOT


def omegitops(*args: str, env: dict[str, str] | None = None, stdout=subprocess.PIPE,
              preexec_fn=None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python3 -m omegitops ARGS`` with this tree first on the path."""
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "omegitops", *args], env=environment,
                          stdout=stdout, stderr=subprocess.PIPE, text=True,
                          preexec_fn=preexec_fn, timeout=timeout)


def no_traceback(run: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip(), "no message on stderr"


def test_a_simulated_cluster_opens_under_a_3_gib_address_space_limit(tmp_path):
    # The state file's read asked for a buffer as large as its 4 GiB limit: under
    # `ulimit -v 3G` every sim command failed with MemoryError.
    spec = f"sim:{tmp_path / 'c.json'}"
    assert omegitops("sim", "init", "--cluster", spec, "--nodes", "1").returncode == 0

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    run = omegitops("sim", "show", "--cluster", spec, preexec_fn=limit_memory)
    assert run.returncode == 0, run.stderr
