"""The manifests a pull request's plan starts from: what the cluster last ran.

A plan against an empty cluster reads "create everything" for every change. A
plan against the base reads what a reviewer needs: which components change,
from which revision to which. No cluster credentials are involved: the status
report the job commits (``status/status.json``) names the commit of the
manifests it last reconciled, and the plan rebuilds that state on a simulated
cluster from those manifests. Without a report (or when its commit is not in
this clone), the base branch's own manifests stand in for it.

``base_manifests`` exports them with ``git archive`` into a scratch folder, at the
same path inside the repository as the manifests the plan reads.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from omegitops.errors import InputError
from omegitops.gitops.commit import read_json
from omegitops.gitops.credentials import git_environment
from omegitops.gitops.gitcmd import Git, GitError
from omegitops.gitops.repo import work_tree

REPORT_FILE = "status.json"


@dataclass(frozen=True)
class Base:
    """Where the plan's starting state comes from."""

    ref: str
    commit: str  # the base ref's commit
    state_commit: str  # the commit whose manifests the state is rebuilt from
    from_report: bool  # state_commit is the one the committed report names
    manifests: Path  # the exported manifests folder (may be empty)
    present: bool  # whether the manifests folder existed at state_commit
    # Where the report was read: the base ref, or the report branch.
    report_at: str = ""

    @property
    def description(self) -> str:
        short = self.state_commit[:12]
        if self.from_report:
            return (f"the state the job last reported (commit {short}, named by the status "
                    f"report at {self.report_at or self.ref}), rebuilt on a simulated "
                    "cluster sized to fit")
        return (f"the manifests at {self.ref} (commit {short}), reconciled on a simulated "
                "cluster sized to fit")

    def to_dict(self) -> dict:
        return {"ref": self.ref, "commit": self.commit, "stateCommit": self.state_commit,
                "fromReport": self.from_report, "manifestsPresent": self.present}


def base_manifests(repo: Path, ref: str, report_dir: str, scratch: Path,
                   report_branch: str | None = None) -> Base:
    """Export the manifests the plan of ``repo`` against ``ref`` starts from; the report
    is read at ``ref``, or on ``report_branch`` (its remote-tracking branch first) when
    the job commits it there."""
    tree = work_tree(repo)
    if tree is None:
        raise InputError(f"--base needs a git repository; {repo} is not in one")
    git = Git(tree, git_environment("", None))
    try:
        relative = PurePosixPath(repo.resolve().relative_to(tree.resolve()).as_posix())
        commit = _commit(git, ref)
        if commit is None:
            raise InputError(f"--base {ref}: no such commit in {tree} (fetch it first, e.g. "
                             "actions/checkout with fetch-depth: 0)")
        report_at, where = (ref, commit)
        if report_branch:
            report_at, where = _report_branch(git, report_branch)
        report = read_json(git.read(where, (PurePosixPath(report_dir) / REPORT_FILE).as_posix())
                           ) if where else None
        named = report.get("revision") if report else None
        state = _commit(git, named) if isinstance(named, str) and named else None
        target = scratch / "base"
        target.mkdir(parents=True, exist_ok=True)
        present = _export(git, state or commit, relative, target)
        return Base(ref, commit, state or commit, state is not None, target / relative, present,
                    report_at)
    finally:
        git.close()


def _report_branch(git: Git, branch: str) -> tuple[str, str | None]:
    """(how the report branch is named, its commit): ``origin/B`` as fetched with the pull
    request (actions/checkout with fetch-depth: 0 brings every branch), else a local B."""
    for name in (f"origin/{branch}", branch):
        found = _commit(git, name)
        if found:
            return name, found
    return branch, None


def _commit(git: Git, ref: str) -> str | None:
    status, out, _ = git.attempt("rev-parse", "--verify", "-q", f"{ref}^{{commit}}")
    return out.strip() if status == 0 and out.strip() else None


def _export(git: Git, commit: str, relative: PurePosixPath, target: Path) -> bool:
    """``git archive`` of ``relative`` at ``commit`` into ``target``; False when absent."""
    where = relative.as_posix()
    spec = f"{commit}:{where}" if where != "." else commit
    status, _, _ = git.attempt("cat-file", "-e", spec)
    if status != 0:
        (target / relative).mkdir(parents=True, exist_ok=True)
        return False
    args = ["git", "archive", "--format=tar", commit] + ([where] if where != "." else [])
    status, out, err = git.repo.git.execute(args, with_extended_output=True,
                                            with_exceptions=False, stdout_as_string=False)
    if status != 0:
        raise GitError(git.failure(args[1:], "", err.decode(errors="replace")))
    with tarfile.open(fileobj=io.BytesIO(out)) as archive:
        archive.extractall(target, filter="data")
    return True
