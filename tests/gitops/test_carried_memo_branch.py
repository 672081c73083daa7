"""The carried load memo on the report branch (``--report-branch`` with
``OMEGITOPS_MEMO_KEY``): each run, a fresh process with no cache folder as the shipped
pods are, leaves what its load found beside the report, and the next run reads it
back when it is signed with the job's key."""

from __future__ import annotations

import json

import pytest

from omegitops.manifests import carried
from omegitops.manifests import memo as memo_module
from tests.gitops.test_gitops import history, remote_file, run_reconcile
from tests.gitops.test_report_branch import BRANCH, protected_remote

MEMO = f"status/{carried.FILE_NAME}"
RUN = ("--until-idle", "--commit", "--push", "--report-branch", BRANCH)


@pytest.fixture
def pod(monkeypatch):
    """A run as the shipped pods make it: no cache folder, the key from the Secret."""
    monkeypatch.setenv(memo_module.ENV_CACHE_DIR, "")
    monkeypatch.setenv(carried.ENV_KEY, "the job's memo key, from its Secret")
    monkeypatch.delenv("OMEGITOPS_CARRIED_MEMO", raising=False)
    return monkeypatch


def _services(err: str) -> int | None:
    """How many services the run took from the carried memo (its log line)."""
    for line in err.splitlines():
        if "carried load memo read from" in line:
            return int(line.rsplit(", ", 1)[1].split()[0])
    return None


def test_the_next_run_reads_what_the_last_one_left(cli, tmp_path, pod):
    url = protected_remote(tmp_path)
    code, _, err = run_reconcile(cli, tmp_path, url, *RUN)
    assert code == 0, err
    assert "no carried load memo" in err and _services(err) is None
    head, body = remote_file(url, MEMO, BRANCH).split(b"\n", 1)
    assert head.startswith(b"omegitops-carried-memo ")
    assert json.loads(body)["services"]
    report = remote_file(url, "status/status.json", BRANCH)

    code, _, err = run_reconcile(cli, tmp_path, url, *RUN)
    assert code == 0, err
    assert _services(err) == len(json.loads(report)["services"]) > 0
    # The same findings: the report's content is the same, so nothing is committed.
    assert len(history(url, BRANCH)) == 1

    # Without the memo the run finds the same again (no report commit either).
    code, _, err = run_reconcile(cli, tmp_path, url, *RUN, "--no-carried-memo")
    assert code == 0, err
    assert "carried load memo" not in err
    assert len(history(url, BRANCH)) == 1


def test_a_memo_signed_with_another_key_is_not_read(cli, tmp_path, pod):
    url = protected_remote(tmp_path)
    assert run_reconcile(cli, tmp_path, url, *RUN)[0] == 0
    pod.setenv(carried.ENV_KEY, "another key, as someone who holds no Secret")
    code, _, err = run_reconcile(cli, tmp_path, url, *RUN)
    assert code == 0, err
    assert "not read: its signature does not match" in err
    assert _services(err) is None
    assert len(history(url, BRANCH)) == 1


def test_no_key_no_memo(cli, tmp_path, pod):
    pod.delenv(carried.ENV_KEY)
    url = protected_remote(tmp_path)
    code, _, err = run_reconcile(cli, tmp_path, url, *RUN)
    assert code == 0, err
    (first,) = history(url, BRANCH)
    assert {e.path for e in first.tree.traverse() if e.type == "blob"} == \
        {"status/status.json", "status/STATUS.md"}


def test_the_environment_turns_it_off(cli, tmp_path, pod):
    pod.setenv("OMEGITOPS_CARRIED_MEMO", "off")
    url = protected_remote(tmp_path)
    assert run_reconcile(cli, tmp_path, url, *RUN)[0] == 0
    (first,) = history(url, BRANCH)
    assert MEMO not in {e.path for e in first.tree.traverse() if e.type == "blob"}


def test_the_memo_is_encoded_only_for_a_report_that_is_committed(cli, tmp_path, pod):
    """Encoding and signing the memo is a few megabytes of JSON at 1,000 services: a run
    whose report did not change commits nothing, and makes no memo to commit."""
    encoded = []
    real = carried.encode
    pod.setattr(carried, "encode", lambda memo, key: encoded.append(1) or real(memo, key))
    url = protected_remote(tmp_path)
    code, _, err = run_reconcile(cli, tmp_path, url, *RUN)
    assert code == 0, err
    assert len(encoded) == 1 and len(history(url, BRANCH)) == 1
    code, _, err = run_reconcile(cli, tmp_path, url, *RUN)
    assert code == 0, err
    assert "status report unchanged" in err
    assert len(encoded) == 1 and len(history(url, BRANCH)) == 1
