"""Running git for one run: one environment, bounded network calls, scrubbed errors."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from omegitops.gitops.credentials import scrub
from omegitops.util.errors import OmegitopsError
from omegitops.util.extras import require

# clone, fetch and push give up after this long rather than outlive the job.
NETWORK_SECONDS = 300.0


class GitError(OmegitopsError):
    """A git command failed; the message is scrubbed of credentials."""


class Git:
    """git in one work tree, with the run's environment (credential helper, no prompts).

    Every failure becomes a ``GitError`` whose message has URL credentials and
    the run's secret values hidden, whatever git printed.
    """

    def __init__(self, worktree: Path | str, env: Mapping[str, str],
                 secrets: Iterable[str] = ()) -> None:
        self.worktree = Path(worktree)
        self.repo = require("git", "git work").Repo(self.worktree)
        self.repo.git.update_environment(**env)
        self.secrets = tuple(secrets)

    def __call__(self, *args: str, network: bool = False) -> str:
        """Run ``git ARGS``; its stdout, or GitError."""
        status, out, err = self.attempt(*args, network=network)
        if status != 0:
            raise GitError(self.failure(args, out, err))
        return out

    def attempt(self, *args: str, network: bool = False) -> tuple[int, str, str]:
        """Run ``git ARGS``; (status, stdout, stderr), never raising on a non-zero status."""
        try:
            return self.repo.git.execute(
                ["git", *args], with_extended_output=True, with_exceptions=False,
                kill_after_timeout=NETWORK_SECONDS if network else None)
        except require("git", "git work").CommandError as err:  # git missing, or timed out
            raise GitError(self.failure(args, "", str(err.stderr or ""))) from err

    def ok(self, *args: str) -> bool:
        """Whether ``git ARGS`` exits 0 (for questions such as ``diff --quiet``)."""
        return self.attempt(*args)[0] == 0

    def read(self, rev: str, path: str) -> bytes | None:
        """The bytes of ``path`` at ``rev``; None when either is missing."""
        status, out, _ = self.repo.git.execute(
            ["git", "cat-file", "blob", f"{rev}:{path}"], with_extended_output=True,
            with_exceptions=False, stdout_as_string=False, strip_newline_in_stdout=False)
        return out if status == 0 else None

    def close(self) -> None:
        """Stop the helper processes GitPython keeps (before the clone is removed)."""
        self.repo.close()

    def failure(self, args: Iterable[str], out: str, err: str) -> str:
        return scrub(f"git {_verb(args)} failed: {one_line(err or out) or 'no message'}",
                     self.secrets)

    def scrub(self, text: str) -> str:
        return scrub(text, self.secrets)


def clone(url: str, target: Path, branch: str | None, env: Mapping[str, str],
          secrets: Iterable[str], shown: str) -> None:
    """Clone the newest commit of one branch of ``url`` (no secret in it) into ``target``."""
    args = ["git", "clone", "--depth=1", "--single-branch", "--no-tags", "--quiet"]
    if branch:
        args += ["--branch", branch]
    where = f"{shown} (branch {branch})" if branch else shown
    git = require("git", "cloning a repository")
    try:
        status, _, stderr = git.Git(str(target.parent)).execute(
            [*args, "--", url, str(target)], env=dict(env), with_extended_output=True,
            with_exceptions=False, kill_after_timeout=NETWORK_SECONDS)
    except git.CommandError as err:  # git missing, or killed after the timeout
        raise GitError(scrub(f"cannot clone {where}: {one_line(str(err.stderr or ''))}",
                             secrets)) from err
    if status != 0:
        raise GitError(scrub(f"cannot clone {where}: {one_line(stderr) or f'git exited {status}'}",
                             secrets))


# What of git's (or a remote's) words a message keeps: the end, where the reason is.
MAX_LINES = 20
MAX_CHARS = 2000
# ANSI escape sequences (colours, cursor moves, OSC titles), then any control character
# left: a remote's hook must not repaint the terminal or forge lines of the job's log.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_])")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without escape sequences and control characters (tabs kept as spaces)."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text.replace("\t", " ")))


def bounded_lines(lines: list[str]) -> list[str]:
    """The last lines of a long message, within MAX_LINES and MAX_CHARS, with a first
    line saying how many were left out."""
    kept: list[str] = []
    size = 0
    for line in reversed(lines[-MAX_LINES:]):
        if size + len(line) > MAX_CHARS:
            if not kept:  # one line longer than all: its end
                kept.append("..." + line[-(MAX_CHARS - 3):])
            break
        kept.append(line)
        size += len(line)
    kept.reverse()
    cut = len(lines) - len(kept)
    return [f"[{cut} earlier line{'s' if cut != 1 else ''} left out]", *kept] if cut else kept


def one_line(text: str) -> str:
    """git's (possibly multi-line) message as one line for an error: printable, and its
    end only when it is long."""
    lines = [line.strip() for line in printable(text.replace("\r", "\n")).splitlines()]
    return " ".join(bounded_lines([line for line in lines if line]))


def _verb(args: Iterable[str]) -> str:
    """The git command of ``args``, past any ``-c key=value`` options."""
    words = list(args)
    while len(words) > 1 and words[0] == "-c":
        words = words[2:]
    return words[0] if words else ""
