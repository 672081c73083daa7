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
from typing import Any, cast

from omegitops.gitops.commit import read_json
from omegitops.gitops.credentials import git_environment
from omegitops.gitops.gitcmd import Git, GitError
from omegitops.gitops.repo import work_tree
from omegitops.manifests.load import ServiceComponent, load, resolved_components
from omegitops.model.ids import ComponentKey
from omegitops.render.component import DesiredComponent
from omegitops.render.desired import build_desired
from omegitops.util.errors import InputError

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
    # The report itself (None: there was none), and the commit it named.
    report: dict[str, Any] | None = None
    named: str | None = None
    # The manifests at the reported commit are the base ref's (only report commits since).
    same_manifests: bool = False

    @property
    def description(self) -> str:
        short = self.state_commit[:12]
        if self.from_report:
            return (f"the state the job last reported (commit {short}, named by the status "
                    f"report at {self.report_at or self.ref}), rebuilt on a simulated "
                    "cluster sized to fit")
        return (f"the manifests at {self.ref} (commit {short}), reconciled on a simulated "
                "cluster sized to fit")

    def to_dict(self) -> dict[str, Any]:
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
        report_at, where = ref, cast(str | None, commit)
        if report_branch:
            report_at, where = _report_branch(git, report_branch)
        report = read_json(git.read(where, (PurePosixPath(report_dir) / REPORT_FILE).as_posix())
                           ) if where else None
        named = report.get("revision") if report else None
        state = _commit(git, named) if isinstance(named, str) and named else None
        target = scratch / "base"
        target.mkdir(parents=True, exist_ok=True)
        present = _export(git, state or commit, relative, target)
        same = state is None or git.attempt("diff", "--quiet", state, commit, "--",
                                            relative.as_posix())[0] == 0
        return Base(ref, commit, state or commit, state is not None, target / relative, present,
                    report_at, report if isinstance(report, dict) else None,
                    named if isinstance(named, str) else None, same)
    finally:
        git.close()


def starting_notes(base: Base, report_dir: str) -> list[str]:
    """What a reviewer should know of where the plan starts: no report, one with no
    Instance state, one older than the base, one naming a commit this clone lacks."""
    where = f"{base.report_at or base.ref}:{report_dir}/{REPORT_FILE}"
    if base.report is None:
        return [(f"No status report at {where}: the plan starts from {base.ref}'s manifests "
                "reconciled on an empty cluster, every Instance on its newest revision. "
                "What the cluster really runs (a partition, a held or Failed revision, a "
                "pinned runtime) is not known to it.")]
    notes = []
    if base.named and not base.from_report:
        notes.append(f"The status report at {where} names commit {base.named[:12]}, which "
                     "is not in this clone (actions/checkout with fetch-depth: 0 brings it): "
                     f"the plan starts from {base.ref}'s manifests instead.")
    elif base.from_report and base.state_commit != base.commit and not base.same_manifests:
        notes.append(f"The job last reported commit {base.state_commit[:12]}; {base.ref} is at "
                     f"{base.commit[:12]} since: the changes between them are not reconciled "
                     "yet, and roll out with this one.")
    if not any(isinstance(c.get("state"), dict)
               for s in base.report.get("services") or [] for c in s.get("components") or []):
        notes.append("The status report holds no Instance state (an omegitops before this "
                     "release wrote it): every Instance is taken to run its component's "
                     "newest revision.")
    return notes


# Commits walked back from the report's for the one that made an Instance's revision.
HISTORY_COMMITS = 30


class RevisionHistory:
    """A component rendered as earlier commits had it, to find the commit that made a
    revision an Instance still runs (a partition holds it there, a pin keeps it): the
    report names revisions, and only their commit's manifests tell their templates."""

    def __init__(self, repo: Path, commit: str, scratch: Path, operator_values: str | None,
                 limit: int = HISTORY_COMMITS, cache_dir: Path | None = None) -> None:
        self.tree = work_tree(repo)
        self.git = Git(self.tree, git_environment("", None)) if self.tree else None
        self.relative = PurePosixPath(repo.resolve().relative_to(self.tree.resolve()).as_posix()
                                      ) if self.tree else PurePosixPath(".")
        self.commit, self.scratch, self.limit = commit, scratch / "history", limit
        self.operator_values = operator_values
        # The load memo: most files are the same from one commit to the next.
        self.cache_dir = cache_dir
        self._commits: list[str] | None = None
        self._loaded: dict[str, dict[ComponentKey, ServiceComponent]] = {}

    def close(self) -> None:
        if self.git is not None:
            self.git.close()

    def find(self, item: ServiceComponent, revision: str) -> DesiredComponent | None:
        """The component as the commit that made ``revision`` rendered it; None when none
        of the last ``limit`` commits of the manifests did."""
        key = _key(item)
        for commit in self.commits():
            match = self._components(commit).get(key)
            if match is None:
                continue
            try:
                desired = build_desired(match.service.data,
                                        match.runtime.data if match.runtime else None,
                                        match.lifecycle, [], None, match.operator)
            except Exception:  # noqa: BLE001, S112 - that commit could not render it
                continue
            if desired.revision == revision:
                return desired
        return None

    def commits(self) -> list[str]:
        if self._commits is None:
            self._commits = []
            if self.git is not None:
                where = self.relative.as_posix()
                status, out, _ = self.git.attempt(
                    "log", "--first-parent", "--format=%H", f"-n{self.limit}", self.commit,
                    "--", where)
                self._commits = out.split() if status == 0 else []
        return self._commits

    def _components(self, commit: str) -> dict[ComponentKey, ServiceComponent]:
        if commit not in self._loaded:
            target = self.scratch / commit
            target.mkdir(parents=True, exist_ok=True)
            found: dict[ComponentKey, ServiceComponent] = {}
            if _export(cast(Git, self.git), commit, self.relative, target):
                loaded = load(target / self.relative, self.operator_values,
                              cache_dir=self.cache_dir)
                found = {_key(i): i for i in resolved_components(loaded)
                         if i.lifecycle.managed}
            self._loaded[commit] = found
        return self._loaded[commit]


def _key(item: ServiceComponent) -> ComponentKey:
    meta = item.service.data["metadata"]
    return ComponentKey(meta.get("namespace") or "default", meta["name"],
                        item.lifecycle.component)


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
