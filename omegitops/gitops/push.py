"""Pushing the report commit: never forced; rebased and retried when the remote moved.

A push the remote rejects because it moved (someone pushed meanwhile) is
followed by a fetch and a rebase of the local commits onto the new remote
head, then another push, a bounded number of times. The report folder is
omegitops' alone, so a conflict there is resolved by re-rendering: the folder
is reset to the remote's version and our report files are written over it.
A conflict anywhere else stops the run. Nothing is ever force-pushed, and
what others pushed is always kept.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import cast

from omegitops.gitops.commit import (
    ReportCommit,
    commit_message,
    committed_file,
    read_json,
    record,
)
from omegitops.gitops.credentials import redact
from omegitops.gitops.gitcmd import Git, GitError, bounded_lines, one_line, printable
from omegitops.gitops.repo import Checkout
from omegitops.report.status import JSON_FILE

log = logging.getLogger("omegitops")

RETRIES = 3
BACKOFF_SECONDS = 0.5  # times the attempt number: 0.5 s, 1 s, 1.5 s
# A rebase stops at most once per replayed commit; a clone replays one.
MAX_REBASE_STOPS = 20
NOTHING_LOST = ("nothing is lost: the reconcile was applied, and the next run "
                "commits the report again")


class PushError(GitError):
    """The report commit could not be pushed (the reconcile itself was applied)."""


@dataclass(frozen=True)
class Target:
    remote: str  # the remote's name, e.g. origin
    branch: str
    shown: str   # the remote's URL, redacted

    def __str__(self) -> str:
        return f"{self.shown} (branch {self.branch})"


def push_report(checkout: Checkout, commit: ReportCommit, retries: int | None = None,
                backoff: float | None = None,
                sleep: Callable[[float], None] = time.sleep) -> None:
    """Push HEAD to the tracking branch; on "the remote moved", catch up and try again."""
    retries = RETRIES if retries is None else retries
    backoff = BACKOFF_SECONDS if backoff is None else backoff
    git = checkout.git
    assert git is not None, "push needs a git checkout"
    target = remote_target(checkout)
    reason = ""
    for attempt in range(retries + 1):
        if attempt:
            log.info("the remote moved; putting the report on top of it (retry %d of %d)",
                     attempt, retries)
            sleep(backoff * attempt)
            commit = _catch_up(git, target, commit)
        pushed, moved, reason = _push_once(git, target)
        if pushed:
            log.info("pushed the status report to %s", target)
            return
        if not moved:
            break
    raise PushError(git.scrub(f"could not push the status report to {target}: {reason}; "
                              f"{NOTHING_LOST}"))


def remote_target(checkout: Checkout) -> Target:
    """Where HEAD goes: the branch cloned, or the tracking branch of a local checkout."""
    git = cast(Git, checkout.git)
    if checkout.cloned:
        return Target("origin", checkout.branch or "HEAD", checkout.shown)
    try:
        tracking = git.repo.active_branch.tracking_branch()
    except TypeError as err:  # detached HEAD
        raise PushError(f"{checkout.shown} has a detached HEAD: nothing to push to; "
                        f"{NOTHING_LOST}") from err
    if tracking is None:
        raise PushError(f"branch {git.repo.active_branch.name} of {checkout.shown} has no "
                        f"upstream to push to; {NOTHING_LOST}")
    url = git("remote", "get-url", tracking.remote_name).strip()
    return Target(tracking.remote_name, tracking.remote_head, redact(url))


def _push_once(git: Git, target: Target) -> tuple[bool, bool, str]:
    """(pushed, rejected because the remote moved, git's reason)."""
    if _deleted(git, target):
        # A push to a branch that is gone makes it again: whoever deleted it meant the
        # opposite, and the manifests it held are no longer the ones reconciled.
        return False, False, (f"branch {target.branch} was deleted on the remote after it was "
                              "read; pushing would create it again")
    # An explicit refspec without "+": git refuses anything but a fast-forward.
    status, out, err = git.attempt("push", "--porcelain", target.remote,
                                   f"HEAD:refs/heads/{target.branch}", network=True)
    if status == 0:
        return True, False, ""
    refs = [line for line in out.splitlines() if line.startswith("!")]
    detail = one_line(refs[0].split("\t")[-1]) if refs else one_line(err)
    return False, raced(refs, err), git.scrub(remote_says(detail or f"git push exited {status}",
                                                     err))


# A remote that could not lock or update the branch because another push was updating
# it at that moment: a race, as "[rejected]" is, not a rule. The ref's line says it
# (newer git), or says "failed to update ref" and the remote's words say why (older).
RACE_REASONS = ("cannot lock ref", "incorrect old value provided")


def raced(refs: list[str], err: str) -> bool:
    """Whether git's refused refs (``--porcelain`` lines starting "!") say the remote
    moved: "[rejected] (fetch first)" or "(non-fast-forward)" when others pushed
    meanwhile, or a "[remote rejected]" for a ref another push held locked. Any other
    "[remote rejected]" is a hook or a protection rule: retrying cannot help."""
    def locked(line: str) -> bool:
        return any(race in line for race in RACE_REASONS) or (
            "failed to update ref" in line and any(race in err for race in RACE_REASONS))
    return any("[rejected]" in line or locked(line) for line in refs)


def _deleted(git: Git, target: Target) -> bool:
    """Whether the branch is missing on the remote (an unanswered ls-remote is left to
    the push itself to report)."""
    status, out, _ = git.attempt("ls-remote", "--heads", target.remote,
                                 f"refs/heads/{target.branch}", network=True)
    return status == 0 and not out.strip()


def remote_says(detail: str, err: str) -> str:
    """git's reason for a refused push, with what the remote's hook said (its
    ``remote:`` lines), which names the rule that refused it."""
    said = [printable(line.removeprefix("remote:")).strip() for line in err.splitlines()
            if line.startswith("remote:")]
    said = bounded_lines([line for line in said if line])
    return f"{detail} (the remote says: {'; '.join(said)})" if said else detail


def _catch_up(git: Git, target: Target, commit: ReportCommit) -> ReportCommit:
    """Fetch the remote branch and put the local commits, report last, on top of it;
    the report commit as it now is."""
    git("fetch", "--quiet", "--no-tags", target.remote, f"refs/heads/{target.branch}",
        network=True)
    upstream = git("rev-parse", "FETCH_HEAD").strip()
    _rebase(git, upstream, commit)
    _ensure_report(git, upstream, commit)
    return _retell(git, commit)


def _retell(git: Git, commit: ReportCommit) -> ReportCommit:
    """Say what moved against the parent the report commit lands on.

    Its message was written against the report of the commit it was made on; on
    top of a remote that moved (another run's report pushed meanwhile, say), what
    this commit changes is the difference from the report there.
    """
    if git("log", "-1", "--format=%B", "HEAD").strip() != commit.message.strip():
        return commit  # the rebase dropped it: the remote has this report already
    parent = read_json(committed_file(git, "HEAD^", commit.folder / JSON_FILE))
    message = commit_message(parent, read_json(commit.files.get(JSON_FILE)) or {})
    if message == commit.message:
        return commit
    record(git, commit.folder, message, commit.author, amend=True)
    log.info("the report commit now reads: %s", message.splitlines()[0])
    return replace(commit, sha=git("rev-parse", "HEAD").strip(), message=message)


def _rebase(git: Git, upstream: str, commit: ReportCommit) -> None:
    status, _, err = git.attempt(*commit.author.config(), "rebase", "--quiet", upstream)
    if status != 0 and not _rebasing(git):
        # It did not even start (e.g. local changes in a checkout used in place).
        raise PushError(git.scrub(f"cannot rebase onto the remote: {one_line(err)}; "
                                  f"{NOTHING_LOST}"))
    for _ in range(MAX_REBASE_STOPS):
        if not _rebasing(git):
            return
        _resolve(git, commit)
    git.attempt("rebase", "--abort")
    raise PushError(f"the rebase onto the remote does not end; {NOTHING_LOST}")


def _rebasing(git: Git) -> bool:
    git_dir = Path(git.repo.git_dir)
    return (git_dir / "rebase-merge").exists() or (git_dir / "rebase-apply").exists()


def _resolve(git: Git, commit: ReportCommit) -> None:
    """Settle a stopped rebase: conflicts in the report folder by re-rendering, else abort."""
    conflicted = git("diff", "--name-only", "--diff-filter=U").split()
    outside = [path for path in conflicted if not _inside(path, commit.folder)]
    if outside:
        git.attempt("rebase", "--abort")
        raise PushError(f"the remote changed {', '.join(outside[:3])} in a way that conflicts "
                        f"with local commits; {NOTHING_LOST}")
    rerender(git, commit)
    if git.ok("diff", "--cached", "--quiet"):
        # Re-rendered, this commit changes nothing: the remote has our report already.
        args = ["rebase", "--skip"]
    else:
        args = ["rebase", "--continue"]
    status, _, err = git.attempt(*commit.author.config(), *args)
    if status != 0 and not _rebasing(git):
        raise PushError(git.scrub(f"cannot rebase onto the remote: {one_line(err)}; "
                                  f"{NOTHING_LOST}"))


def _inside(path: str, folder: PurePosixPath) -> bool:
    return PurePosixPath(path).is_relative_to(folder)


def rerender(git: Git, commit: ReportCommit) -> None:
    """Make the report folder HEAD's version with our report files over it, staged."""
    folder = str(commit.folder)
    git("rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", folder)
    shutil.rmtree(git.worktree / commit.folder, ignore_errors=True)
    if git.ok("cat-file", "-e", f"HEAD:{folder}"):
        git("checkout", "HEAD", "--", folder)
    target = git.worktree / commit.folder
    target.mkdir(parents=True, exist_ok=True)
    for name, data in commit.files.items():
        (target / name).write_bytes(data)
    git("add", "--all", "--", folder)


def _ensure_report(git: Git, upstream: str, commit: ReportCommit) -> None:
    """After a clean rebase, make sure the folder holds exactly our report files.

    A clean three-way merge can still mix hunks of two reports into one file;
    that mixture is replaced by our report, in our commit.
    """
    if all(committed_file(git, "HEAD", commit.folder / name) == data
           for name, data in commit.files.items()):
        return
    rerender(git, commit)
    head = git("rev-parse", "HEAD").strip()
    message = git("log", "-1", "--format=%B", "HEAD")
    ours = head != upstream and message.strip() == commit.message.strip()
    # Amend our own commit; if the rebase dropped it (as already applied), commit anew.
    record(git, commit.folder, commit.message, commit.author, amend=ours)
