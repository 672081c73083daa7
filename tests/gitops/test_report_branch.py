"""The report on a branch of its own (``--report-branch``), for a protected ``main``.

The remote refuses every push to ``main`` with a pre-receive hook, as branch
protection does. Without a report branch every run fails to push; with one, the
report goes to its own branch (made on the first run, holding the report folder
only, only ever fast-forwarded), ``main`` is only read, and ``plan --base`` reads the
report from there.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import git

from omegitops.gitops import branch as branch_module
from tests.gitops.test_gitops import (
    example_files,
    history,
    make_remote,
    push_files,
    remote_file,
    run_reconcile,
)

BRANCH = "omegitops-status"


def protected_remote(tmp_path: Path) -> str:
    url = make_remote(tmp_path, {**example_files(), "README.md": "# manifests\n"})
    hook = Path(url.removeprefix("file://")) / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nwhile read old new ref; do\n"
                    "  if [ \"$ref\" = refs/heads/main ]; then\n"
                    "    echo 'main is protected: open a pull request' >&2; exit 1\n"
                    "  fi\ndone\n")
    hook.chmod(0o755)
    return url


def branches(url: str) -> set[str]:
    return {h.name for h in git.Repo(url.removeprefix("file://")).heads}


def test_a_protected_main_refuses_the_report_and_says_why(cli, tmp_path):
    url = protected_remote(tmp_path)
    code, _, err = run_reconcile(cli, tmp_path, url, "--commit", "--push")
    assert code == 1, err
    assert "main is protected: open a pull request" in err
    assert "nothing is lost" in err


def test_the_report_goes_to_its_own_branch_and_main_is_only_read(cli, tmp_path):
    url = protected_remote(tmp_path)
    before = history(url)
    code, _, err = run_reconcile(cli, tmp_path, url, "--until-idle", "--commit", "--push",
                                 "--report-branch", BRANCH)
    assert code == 0, err
    assert history(url) == before
    assert branches(url) == {"main", BRANCH}
    (first,) = history(url, BRANCH)
    assert not first.parents
    files = {e.path for e in first.tree.traverse() if e.type == "blob"}
    assert files == {"status/status.json", "status/STATUS.md"}
    assert first.message.startswith("omegitops: first status report")
    report = json.loads(remote_file(url, "status/status.json", BRANCH))
    assert report["revision"] == before[0].hexsha
    # Nothing new: no commit.
    code, _, err = run_reconcile(cli, tmp_path, url, "--until-idle", "--commit", "--push",
                                 "--report-branch", BRANCH)
    assert code == 0, err
    assert len(history(url, BRANCH)) == 1
    # A change on main: the next report commit follows the first.
    service = "services/qwen3-0-6b/qwen3-0-6b.yaml"
    edited = example_files()[service].decode().replace("minReplicas: 2", "minReplicas: 1")
    push_files(tmp_path, url, {service: edited}, "one replica", branch="side")
    subprocess.run(["git", "--git-dir", url.removeprefix("file://"), "update-ref",
                    "refs/heads/main", "refs/heads/side"], check=True)
    code, _, err = run_reconcile(cli, tmp_path, url, "--until-idle", "--commit", "--push",
                                 "--report-branch", BRANCH)
    assert code == 0, err
    second, again = history(url, BRANCH)
    assert second.parents == (again,) and again == first
    assert json.loads(remote_file(url, "status/status.json", BRANCH))["revision"] == \
        history(url)[0].hexsha


def test_a_report_branch_that_moved_meanwhile_is_followed_not_overwritten(
        cli, tmp_path, monkeypatch):
    url = protected_remote(tmp_path)
    assert run_reconcile(cli, tmp_path, url, "--commit", "--push",
                         "--report-branch", BRANCH)[0] == 0
    real = branch_module.fetch_branch
    calls = []

    def fetch_then_someone_pushes(git_, target):
        found = real(git_, target)
        if not calls:
            # Another run's report lands between our fetch and our push.
            push_files(tmp_path, url, {"status/NOTE.md": "kept\n"}, "someone", branch=BRANCH)
        calls.append(found)
        return found

    monkeypatch.setattr(branch_module, "fetch_branch", fetch_then_someone_pushes)
    code, _, err = run_reconcile(cli, tmp_path, url, "--until-idle", "--commit", "--push",
                                 "--report-branch", BRANCH)
    assert code == 0, err
    assert len(calls) == 2
    head, someone, first = history(url, BRANCH)
    assert head.parents == (someone,) and someone.parents == (first,)
    assert remote_file(url, "status/NOTE.md", BRANCH) == b"kept\n"


def test_the_report_branch_cannot_be_the_manifests_branch(cli, tmp_path):
    url = protected_remote(tmp_path)
    code, _, err = run_reconcile(cli, tmp_path, url, "--commit", "--push",
                                 "--report-branch", "main")
    assert code == 2 and "the branch the manifests are read from" in err
    code, _, err = run_reconcile(cli, tmp_path, url, "--report-branch", BRANCH)
    assert code == 2 and "--report-branch needs --commit" in err


def test_plan_base_reads_the_report_from_the_report_branch(cli, tmp_path):
    url = protected_remote(tmp_path)
    assert run_reconcile(cli, tmp_path, url, "--until-idle", "--commit", "--push",
                         "--report-branch", BRANCH)[0] == 0
    local = git.Repo.clone_from(url, tmp_path / "pr")  # every branch, as fetch-depth: 0
    assert f"origin/{BRANCH}" in {r.name for r in local.remote().refs}
    code, out, err = cli("plan", "--repo", str(tmp_path / "pr"), "--base", "main",
                         "--report-branch", BRANCH, "-o", "json")
    assert code == 0, err
    about = json.loads(out)["cluster"]
    assert about["base"]["fromReport"] is True, about
    assert f"status report at origin/{BRANCH}" in about["description"]
