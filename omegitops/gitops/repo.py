"""Getting the repository: a local folder used in place, or a URL cloned shallow.

``checkout`` is a context manager: a clone lives in a temporary folder that
is removed when the run ends, whatever happened, so nothing of it (the
manifests, the ``.git`` folder) outlives the run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from omegitops.gitops.credentials import git_environment, query_values, redact, resolve
from omegitops.gitops.gitcmd import Git, GitError, clone
from omegitops.util.errors import InputError, UsageError
from omegitops.util.extras import require
from omegitops.util.files import temporary_folder

# Anything with a scheme (https://, ssh://, file://, git://), or scp-like user@host:path.
URL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*://|[\w.-]+@[\w.-]+:)")


@dataclass
class Checkout:
    """The repository of one run."""

    root: Path           # top of the work tree (or the folder given, when it is no git tree)
    manifests: Path      # root / --path: what load() reads
    shown: str           # how reports and messages name it: the redacted URL, or the path given
    git: Git | None = field(default=None, repr=False)  # None for a folder outside git
    cloned: bool = False
    branch: str | None = None  # the branch cloned (None in place: the tracking branch is used)
    revision: str | None = None  # the commit read (None for a folder outside git)


def is_url(repo: str) -> bool:
    return bool(URL.match(repo))


@contextmanager
def checkout(repo: str, branch: str | None = None, path: str | None = None,
             workdir: Path | str | None = None, writable: bool = False) -> Iterator[Checkout]:
    """The repository named by ``repo`` (URL or folder), with its manifests under ``path``.

    A URL is cloned shallow (one commit of one branch) into a temporary folder
    under ``workdir`` (default: the system's), removed on exit. A folder is
    used in place and only read, unless ``writable`` (``--commit``): then it
    must be in a git work tree, whose top is the root.
    """
    if is_url(repo):
        with _cloned(repo, branch, path, workdir) as found:
            yield found
    else:
        found = _in_place(repo, branch, path, writable)
        try:
            yield found
        finally:
            if found.git is not None:
                found.git.close()


@contextmanager
def _cloned(url: str, branch: str | None, path: str | None,
            workdir: Path | str | None) -> Iterator[Checkout]:
    clean, credentials = resolve(url)
    env = git_environment(clean, credentials)
    secrets = [credentials.password] if credentials else []
    secrets += query_values(clean)
    shown = redact(url)
    with temporary_folder("omegitops-", workdir) as parent:
        runner = None
        try:
            target = parent / "repo"
            clone(clean, target, branch, env, secrets, shown)
            runner = Git(target, env, secrets)
            cloned = branch or runner("rev-parse", "--abbrev-ref", "HEAD").strip()
            yield Checkout(root=target, manifests=_subfolder(target, path), shown=shown,
                           git=runner, cloned=True, branch=cloned, revision=_head(runner))
        finally:
            if runner is not None:  # its helper processes stop before the clone goes
                runner.close()


def _in_place(folder: str, branch: str | None, path: str | None, writable: bool) -> Checkout:
    if not folder.strip():
        # Path("") is the working directory: an empty --repo (an unset variable) must
        # not read, and commit into, whatever folder the job happens to run in.
        raise UsageError("--repo is empty: give the repository's folder or URL")
    given = Path(folder)
    if given.exists() and not given.is_dir():
        raise InputError(f"{folder}: a file, not a folder; --repo is the repository's folder "
                         "or URL")
    tree = work_tree(given) if (writable or branch) else None
    if branch and tree is None:
        raise UsageError(f"--branch needs a git repository; {folder} is a plain folder")
    if writable and tree is None:
        raise InputError(f"--commit needs a git work tree; {folder} is not in one")
    if tree is None:
        return Checkout(root=given, manifests=_subfolder(given, path), shown=folder,
                        revision=_head_of_folder(given))
    runner = Git(tree, git_environment("", None))
    if branch:
        _require_branch(runner, folder, branch)
    return Checkout(root=tree, manifests=_subfolder(given, path), shown=folder, git=runner,
                    revision=_head(runner))


def _head(runner: Git) -> str | None:
    """The commit checked out; None in a repository with no commit yet. A git that
    cannot run here at all (``GIT_CONFIG_COUNT=abc`` in the environment, a broken
    config) is refused now, before the cluster is touched, not at the report's commit."""
    status, out, err = runner.attempt("rev-parse", "--verify", "-q", "HEAD")
    if status != 0 and err.strip():  # -q: no commit yet is said by the status alone
        raise GitError(runner.failure(("rev-parse",), out, err))
    return (out.strip() or None) if status == 0 else None


def _head_of_folder(folder: Path) -> str | None:
    """The commit of the work tree holding a folder read in place, when there is one
    and GitPython is installed (the report names it; nothing else needs git here)."""
    try:
        git = require("git", "naming the commit")
    except InputError:
        return None
    try:
        found = git.Repo(folder, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    try:
        return found.head.commit.hexsha
    except ValueError:  # no commit yet
        return None
    finally:
        found.close()


def work_tree(folder: Path) -> Path | None:
    """The top of the git work tree holding ``folder``, or None."""
    git = require("git", "--commit and --branch")
    try:
        found = git.Repo(folder, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    return Path(found.working_tree_dir) if found.working_tree_dir else None


def _require_branch(runner: Git, folder: str, branch: str) -> None:
    # A checkout someone works in is never switched to another branch under them.
    current = runner("rev-parse", "--abbrev-ref", "HEAD").strip()
    if current != branch:
        raise InputError(f"{folder} is on branch {current}, not {branch}; omegitops does not "
                         "switch the branch of a local repository (clone a URL instead)")


def _subfolder(root: Path, path: str | None) -> Path:
    """``root / path``, refusing a path that leaves the repository."""
    if not path:
        return root
    relative = PurePosixPath(path)
    if relative.is_absolute() or ".." in relative.parts:
        raise UsageError(f"--path must be a folder inside the repository, not {path}")
    folder = root / relative
    if not folder.is_dir():
        raise InputError(f"--path {path}: no such folder in the repository")
    return folder


def report_path(report_dir: str) -> PurePosixPath:
    """``--report-dir`` under ``--commit``: a folder relative to the repository root.

    Checked before anything is cloned, so that a wrong command line costs nothing.
    """
    relative = PurePosixPath(report_dir)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts \
            or relative.parts[0] == ".git":
        raise UsageError("with --commit, --report-dir must be a folder inside the repository "
                         f"(relative to its root), not {report_dir}")
    return relative
