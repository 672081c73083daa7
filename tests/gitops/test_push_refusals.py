"""What a remote says and does to a push, and what the run shows of it: a ref locked by
another writer is a race, tried again; a refusal is shown short and printable; a token
in a URL's query is never shown; the clone is removed whatever the moment of a signal.

The remote is a bare repository reached by ``file://``; its hooks play the remote's
side (a writer holding the branch's lock, a long coloured refusal)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from omegitops.app.stopping import Interrupted, orderly_stop
from omegitops.gitops import checkout
from tests.conftest import EXAMPLES

SECRET = "t0k3n-in-the-query"


@pytest.fixture(autouse=True)
def no_git_credentials(monkeypatch):
    for name in ("GIT_TOKEN", "GIT_USERNAME", "GIT_TOKEN_FILE", "GIT_CONFIG_COUNT"):
        monkeypatch.delenv(name, raising=False)


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", "-c", "user.name=Someone", "-c", "user.email=s@example.com",
                           *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def bare(tmp_path) -> Path:
    """A bare repository whose main holds the examples."""
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", "-b", "main", str(remote))
    work = tmp_path / "work"
    shutil.copytree(EXAMPLES, work)
    git("init", "-q", "-b", "main", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "the manifests", cwd=work)
    git("push", "-q", str(remote), "main", cwd=work)
    shutil.rmtree(work)
    return remote


def hook(remote: Path, script: str) -> None:
    path = remote / "hooks" / "pre-receive"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def reconcile(cli, tmp_path, url: str, *extra: str):
    return cli("reconcile", "--repo", url, "--cluster", f"sim:{tmp_path / 'c.json'}", *extra)


@pytest.mark.parametrize("branch", ["main", "reports"])
def test_a_branch_locked_by_another_writer_is_a_race_tried_again(cli, tmp_path, bare, caplog,
                                                                 branch):
    # The first push finds the branch's ref locked, as while another push updates it
    # ("cannot lock ref"); the writer is done by the next one. On main, or on a report
    # branch (made by the push).
    lock = f"refs/heads/{branch}.lock"
    hook(bare, f'if [ -e racing ]; then rm -f {lock}; else touch racing {lock}; fi\n')
    extra = [] if branch == "main" else ["--report-branch", branch]
    code, _, err = reconcile(cli, tmp_path, bare.as_uri(), "--commit", "--push", *extra)
    assert code == 0, err
    assert "moved" in caplog.text
    assert "status/status.json" in git("--git-dir", str(bare), "ls-tree", "-r", "--name-only",
                                       branch)


def test_a_long_coloured_refusal_is_shown_short_and_printable(cli, tmp_path, bare):
    hook(bare, 'i=0; while [ $i -lt 3000 ]; do printf "\\033[31mrule %d\\033[0m\\n" $i >&2; '
               'i=$((i+1)); done\n'
               'head -c 200000 /dev/zero | tr "\\0" "x" >&2; echo >&2\n'
               'printf "\\033]0;owned\\007the branch is protected\\n" >&2\nexit 1\n')
    code, _, err = reconcile(cli, tmp_path, bare.as_uri(), "--commit", "--push")
    assert code == 1
    line = err.splitlines()[-1]
    assert line.startswith("omegitops: error: could not push the status report")
    assert "the branch is protected" in line and "earlier lines left out" in line
    assert len(line) < 3000
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in err.replace("\n", ""))


@pytest.mark.parametrize("url", [
    "{bare}?access_token={secret}",
    "https://127.0.0.1:9/org/repo.git?private_token={secret}&ref=main",
])
def test_a_token_in_the_query_is_never_shown(cli, tmp_path, bare, url):
    given = url.format(bare=bare.as_uri() + "-missing", secret=SECRET)
    code, out, err = reconcile(cli, tmp_path, given)
    assert code == 1
    assert "cannot clone" in err and "token=***" in err
    assert SECRET not in out + err


def signal_at(real, after: bool):
    """``real`` with a SIGTERM sent to this process just before it runs, or just after."""
    def call(*args, **kwargs):
        if not after:
            os.kill(os.getpid(), signal.SIGTERM)
        result = real(*args, **kwargs)
        if after:
            os.kill(os.getpid(), signal.SIGTERM)
        return result
    return call


@contextlib.contextmanager
def another_thread(running: bool):
    """A second thread that does not block signals (as a client's pool would): the
    kernel may hand it the process's SIGTERM instead of the main thread."""
    if not running:
        yield
        return
    done = threading.Event()
    thread = threading.Thread(target=done.wait, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@pytest.mark.parametrize("threads", ["main thread only", "another thread"])
@pytest.mark.parametrize("moment", ["made", "removed"])
def test_a_sigterm_while_the_clone_folder_is_made_or_removed_leaves_nothing(
        tmp_path, bare, monkeypatch, moment, threads):
    workdir = tmp_path / "tmp"
    workdir.mkdir()
    if moment == "made":  # the folder exists, the code that removes it is not running yet
        monkeypatch.setattr(tempfile, "mkdtemp", signal_at(tempfile.mkdtemp, after=True))
    else:  # the removal is starting
        monkeypatch.setattr(shutil, "rmtree", signal_at(shutil.rmtree, after=False))
    with another_thread(threads == "another thread"), orderly_stop(), \
            pytest.raises(Interrupted), checkout(bare.as_uri(), workdir=workdir):
        pass
    assert list(workdir.iterdir()) == []
