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

from tests.conftest import EXAMPLES, REPO_ROOT


def omegitops(*args: str, env: dict[str, str] | None = None, stdout=subprocess.PIPE,
              preexec_fn=None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python3 -m omegitops ARGS`` with this tree first on the path."""
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "omegitops", *args], env=environment, check=False,
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


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_standard_output_on_a_full_device_is_one_line_and_exit_1():
    with open("/dev/full", "w") as full:
        run = omegitops("validate", "--repo", str(EXAMPLES), stdout=full)
    assert run.returncode == 1
    no_traceback(run)
    assert run.stderr == "omegitops: error: cannot write the output: No space left on device\n"


def test_a_path_the_output_encoding_cannot_show_is_escaped(tmp_path):
    folder = tmp_path / "dépôt"
    run = omegitops("validate", "--repo", str(folder), env={"PYTHONIOENCODING": "ascii"})
    assert run.returncode == 1
    assert "Traceback" not in run.stderr, run.stderr
    assert "d\\xe9p\\xf4t" in run.stdout + run.stderr


def test_a_repository_path_too_long_for_the_system_is_named_short(tmp_path):
    run = omegitops("reconcile", "--repo", "a" * 100_000,
                    "--cluster", f"sim:{tmp_path / 'c.json'}")
    assert run.returncode == 1
    no_traceback(run)
    assert "File name too long" in run.stderr and "(100000 characters)" in run.stderr
    assert len(run.stderr) < 500
    assert not (tmp_path / "c.json").exists()


def test_a_git_that_refuses_its_environment_is_a_git_error_before_the_cluster(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    environment = {"GIT_CONFIG_COUNT": "abc"}
    run = omegitops("reconcile", "--repo", str(repo), "--commit",
                    "--cluster", f"sim:{tmp_path / 'c.json'}", env=environment)
    assert run.returncode == 1
    no_traceback(run)
    assert run.stderr.startswith("omegitops: error: git ") and "GIT_CONFIG_COUNT" in run.stderr
    assert not (tmp_path / "c.json").exists()  # refused before the cluster was touched
    cloned = omegitops("reconcile", "--repo", repo.as_uri(),
                       "--cluster", f"sim:{tmp_path / 'c.json'}", env=environment)
    assert cloned.returncode == 1
    no_traceback(cloned)
    assert "cannot clone" in cloned.stderr and "GIT_CONFIG_COUNT" in cloned.stderr


def test_a_bad_git_config_count_beside_a_token_is_a_git_error(tmp_path):
    # With credentials, the run adds its own settings after the ones already counted.
    run = omegitops("reconcile", "--repo", "https://127.0.0.1:9/org/repo.git",
                    "--cluster", f"sim:{tmp_path / 'c.json'}",
                    env={"GIT_CONFIG_COUNT": "abc", "GIT_TOKEN": "s3cr3t-token"})
    assert run.returncode == 1
    no_traceback(run)
    assert "GIT_CONFIG_COUNT='abc' in the environment is not a count" in run.stderr
    assert "s3cr3t-token" not in run.stderr
