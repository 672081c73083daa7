"""The report on a branch of its own (``--report-branch``), as Flux's image automation
pushes to a ``push.branch``.

A team that protects ``main`` (pushes refused, or pull requests required to be up
to date) cannot take a report commit there every few minutes. With a report branch
the manifests branch is only read: the report folder is committed onto the report
branch, whose commits hold that folder and nothing else of the manifests. The branch
is made on the first run (a commit without parent) and then only ever
fast-forwarded: each report commit has the branch's last commit as its parent, and a
push the remote refuses because another run pushed first is made again on top of
that run's commit, its message told against the report it now follows.

The commit is built without touching any work tree or index: the files become blobs,
the folder a tree (over the branch's own tree, so whatever else someone keeps there
stays), the tree a commit (``git hash-object``, ``mktree``, ``commit-tree``).
"""

from __future__ import annotations

import functools
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from omegitops.gitops.commit import Author, commit_message, read_json
from omegitops.gitops.gitcmd import Git, GitError, one_line
from omegitops.gitops.push import (
    BACKOFF_SECONDS,
    NOTHING_LOST,
    RETRIES,
    PushError,
    Target,
    raced,
    remote_says,
    remote_target,
)
from omegitops.gitops.repo import Checkout
from omegitops.report.status import JSON_FILE, content_key

log = logging.getLogger("omegitops")

LOCAL = "refs/heads/"


# Files to commit beside the report, made only when the report changed (the carried
# load memo: a few megabytes of JSON to encode and sign at 1,000 services).
Beside = Callable[[], dict[str, bytes]]


def commit_report_branch(checkout: Checkout, target: Target | None, folder: PurePosixPath,
                         files: dict[str, bytes], author: Author,
                         retries: int | None = None, backoff: float | None = None,
                         sleep: Callable[[float], None] = time.sleep,
                         beside: Beside | None = None) -> str | None:
    """Commit ``files`` (and ``beside()``'s) as ``folder`` onto the report branch; push it
    when ``target`` is given (its remote, and the report branch as its branch). The
    commit, or None when the report did not change."""
    git = checkout.git
    assert git is not None, "the report branch needs a git checkout"
    retries = RETRIES if retries is None else retries
    backoff = BACKOFF_SECONDS if backoff is None else backoff
    branch = target.branch if target else None
    reason = ""
    for attempt in range(retries + 1):
        if attempt:
            log.info("the report branch moved; committing the report on top of it "
                     "(retry %d of %d)", attempt, retries)
            sleep(backoff * attempt)
        parent = fetch_branch(git, target) if target else None
        sha = _commit(git, parent, folder, files, author, beside)
        if sha is None:
            log.info("status report unchanged; nothing to commit")
            return None
        if target is None:
            return sha
        status, out, err = git.attempt("push", "--porcelain", target.remote,
                                       f"{sha}:{LOCAL}{branch}", network=True)
        if status == 0:
            log.info("pushed the status report to %s", target)
            return sha
        refs = [line for line in out.splitlines() if line.startswith("!")]
        detail = one_line(refs[0].split("\t")[-1]) if refs else one_line(err)
        reason = git.scrub(remote_says(detail or f"git push exited {status}", err))
        if not raced(refs, err):
            break
    raise PushError(git.scrub(f"could not push the status report to {target}: {reason}; "
                              f"{NOTHING_LOST}"))


def commit_local_branch(checkout: Checkout, branch: str, folder: PurePosixPath,
                        files: dict[str, bytes], author: Author,
                        beside: Beside | None = None) -> str | None:
    """Commit the report onto the local branch ``branch`` (made when missing), for a
    run that commits without pushing."""
    git = checkout.git
    assert git is not None, "the report branch needs a git checkout"
    parent = _resolve(git, f"{LOCAL}{branch}")
    sha = _commit(git, parent, folder, files, author, beside)
    if sha is None:
        log.info("status report unchanged; nothing to commit")
        return None
    # The old value guards the update: a branch that moved meanwhile is not overwritten.
    git("update-ref", f"{LOCAL}{branch}", sha, parent or "")
    log.info("committed the status report on branch %s", branch)
    return sha


def fetch_branch(git: Git, target: Target) -> str | None:
    """The remote report branch's last commit, fetched; None when the remote has no such
    branch yet (the first report makes it)."""
    status, out, err = git.attempt("ls-remote", "--heads", target.remote,
                                   f"{LOCAL}{target.branch}", network=True)
    if status != 0:
        raise PushError(git.scrub(f"cannot read the report branch of {target}: "
                                  f"{one_line(err)}; {NOTHING_LOST}"))
    if not out.strip():
        return None
    git("fetch", "--quiet", "--no-tags", target.remote, f"{LOCAL}{target.branch}",
        network=True)
    return git("rev-parse", "FETCH_HEAD").strip()


def _commit(git: Git, parent: str | None, folder: PurePosixPath, files: dict[str, bytes],
            author: Author, beside: Beside | None = None) -> str | None:
    """A commit of ``files`` and ``beside()``'s as ``folder`` over ``parent``'s tree;
    None when the report's content is the one ``parent`` holds."""
    old = read_json(git.read(parent, (folder / JSON_FILE).as_posix())) if parent else None
    new = read_json(files.get(JSON_FILE))
    if old is not None and new is not None and content_key(old) == content_key(new):
        return None
    if beside is not None:
        files = {**files, **beside()}
    ours = [("100644", "blob", _blob(git, data), name) for name, data in sorted(files.items())]
    tree = _graft(git, f"{parent}^{{tree}}" if parent else None, folder.parts, ours)
    message = commit_message(old, new or {})
    args = [*author.config(), "commit-tree", tree, "-m", message]
    if parent:
        args += ["-p", parent]
    status, out, err = git.repo.git.execute(
        ["git", *args], with_extended_output=True, with_exceptions=False,
        env={"GIT_AUTHOR_NAME": author.name, "GIT_AUTHOR_EMAIL": author.email})
    if status != 0:
        raise GitError(git.failure(args, out, err))
    log.info("committed the status report: %s", message.splitlines()[0])
    return out.strip()


def _graft(git: Git, base: str | None, parts: tuple[str, ...],
           ours: list[tuple[str, str, str, str]]) -> str:
    """The tree ``base`` with our files written into the folder at ``parts``: the other
    files of that folder and everything beside it are kept, as a report commit on the
    manifests' branch keeps them."""
    entries = _entries(git, base) if base else []
    if not parts:
        names = {entry[3] for entry in ours}
        return _mktree(git, [e for e in entries if e[3] not in names] + ours)
    name, rest = parts[0], parts[1:]
    below = next((sha for mode, kind, sha, entry in entries
                  if entry == name and kind == "tree"), None)
    kept = [e for e in entries if e[3] != name]
    return _mktree(git, kept + [("040000", "tree", _graft(git, below, rest, ours), name)])


def _entries(git: Git, tree: str) -> list[tuple[str, str, str, str]]:
    status, out, _ = git.attempt("ls-tree", "-z", tree)
    if status != 0:
        return []
    entries = []
    for line in out.split("\0"):
        if line:
            meta, name = line.split("\t", 1)
            mode, kind, sha = meta.split(" ")
            entries.append((mode, kind, sha, name))
    return entries


def _mktree(git: Git, entries: list[tuple[str, str, str, str]]) -> str:
    text = "".join(f"{mode} {kind} {sha}\t{name}\0" for mode, kind, sha, name in entries)
    return _stdin(git, ["mktree", "-z"], text.encode())


def _blob(git: Git, data: bytes) -> str:
    return _stdin(git, ["hash-object", "-w", "--stdin"], data)


def _stdin(git: Git, args: list[str], data: bytes) -> str:
    with tempfile.TemporaryFile() as stream:
        stream.write(data)
        stream.seek(0)
        status, out, err = git.repo.git.execute(["git", *args], istream=stream,
                                                with_extended_output=True,
                                                with_exceptions=False)
    if status != 0:
        raise GitError(git.failure(args, out, err))
    return out.strip()


def _resolve(git: Git, ref: str) -> str | None:
    status, out, _ = git.attempt("rev-parse", "--verify", "-q", f"{ref}^{{commit}}")
    return out.strip() if status == 0 and out.strip() else None


def report_target(checkout: Checkout, branch: str) -> Target:
    """Where the report branch is pushed: the remote the manifests came from."""
    found = remote_target(checkout)
    return Target(found.remote, check_report_branch(checkout, branch), found.shown)


def check_report_branch(checkout: Checkout, branch: str) -> str:
    """``branch``, unless it is the one the manifests are read from (a usage error,
    raised before anything is reconciled)."""
    from omegitops.util.errors import UsageError

    git = checkout.git
    current = checkout.branch
    if current is None and git is not None:
        status, out, _ = git.attempt("symbolic-ref", "--short", "-q", "HEAD")
        current = out.strip() if status == 0 else None
    status = git.attempt("check-ref-format", "--branch", branch)[0] if git else 0
    if status != 0 or not branch:
        raise UsageError(f"--report-branch {branch!r} is not a valid branch name")
    if branch == current:
        raise UsageError(f"--report-branch {branch} is the branch the manifests are read "
                         "from; choose another (e.g. omegitops-status)")
    return branch


def read_report_file(checkout: Checkout, branch: str, folder: PurePosixPath, name: str,
                     push: bool, max_bytes: int) -> bytes | None:
    """The file ``name`` of the report folder on the report branch, as the last report
    commit left it (fetched from the remote with ``push``, else the local branch); None
    when there is none yet, or it is larger than ``max_bytes`` (then not read at all).
    Raises ``PushError`` or ``GitError`` when the remote cannot be read."""
    git = checkout.git
    if git is None:
        return None
    if push:
        parent = fetch_branch(git, report_target(checkout, branch))
    else:
        parent = _resolve(git, f"{LOCAL}{branch}")
    if parent is None:
        return None
    path = (folder / name).as_posix()
    status, out, _ = git.attempt("cat-file", "-s", f"{parent}:{path}")
    if status != 0:
        return None
    if int(out.strip()) > max_bytes:
        log.info("%s on branch %s not read: it is larger than %d bytes", path, branch,
                 max_bytes)
        return None
    return git.read(parent, path)


def publish_report(checkout: Checkout, folder: PurePosixPath, written: Path, author: Author,
                   push: bool, branch: str | None,
                   beside: Beside | None = None) -> None:
    """Commit (and with ``push``, push) the report written in ``written``: into the
    manifests' branch, where it was written in place (``branch`` None), or onto the
    report branch ``branch``, with the files ``beside()`` makes beside it in the report
    folder (the carried load memo), made and committed only with a report that
    changed."""
    from omegitops.gitops.commit import commit_report
    from omegitops.gitops.push import push_report
    from omegitops.report.status import MARKDOWN_FILE

    git = checkout.git
    assert git is not None, "committing the report needs a git checkout"
    if branch is None:
        commit = commit_report(git, folder, author)
        if commit is not None and push:
            push_report(checkout, commit)
        return
    files = {name: (written / name).read_bytes() for name in (JSON_FILE, MARKDOWN_FILE)
             if (written / name).is_file()}
    # Made at most once, however often a moved branch has the commit made again.
    made = functools.cache(beside) if beside is not None else None
    if push:
        commit_report_branch(checkout, report_target(checkout, branch), folder, files, author,
                             beside=made)
    else:
        commit_local_branch(checkout, branch, folder, files, author, beside=made)
