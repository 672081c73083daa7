"""Committing the status report: only its folder, only when its content changed.

The report carries ``generatedAt``, which moves every run; whether anything
changed is decided on ``report.content_key`` of the new ``status.json`` and
the committed one, so that a run that moved nothing commits nothing. The
commit message says what moved, component by component.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from omegitops.gitops.gitcmd import Git, GitError
from omegitops.model.ids import ComponentKey
from omegitops.model.replica import replica_name
from omegitops.report.status import JSON_FILE, MARKDOWN_FILE, content_key
from omegitops.util.errors import UsageError

log = logging.getLogger("omegitops")

DEFAULT_AUTHOR = "omegitops <omegitops@localhost>"
SUBJECT_LIMIT = 72
PREFIX = "omegitops: "
AUTHOR = re.compile(r"^\s*(?P<name>[^<>]*?)\s*<(?P<email>[^<>\s]+)>\s*$")


@dataclass(frozen=True)
class Author:
    name: str
    email: str

    @classmethod
    def parse(cls, text: str) -> Author:
        """``Name <email>``, as git writes it."""
        match = AUTHOR.match(text)
        if not match or not match["name"]:
            raise UsageError(f'--author must look like "Name <email>", not {text!r}')
        return cls(match["name"], match["email"])

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"

    def config(self) -> list[str]:
        """git options making this identity the committer too (the environment still wins)."""
        return ["-c", f"user.name={self.name}", "-c", f"user.email={self.email}"]


@dataclass(frozen=True)
class ReportCommit:
    """A report commit, with what is needed to make it again on top of a moved remote."""

    sha: str
    folder: PurePosixPath
    message: str
    author: Author
    files: dict[str, bytes]  # the report files as committed, by name


def commit_report(git: Git, folder: PurePosixPath, author: Author) -> ReportCommit | None:
    """Commit the report in ``folder`` (relative to the root) when its content changed.

    Only ``folder`` is staged and committed (``git commit -- folder``): any
    other change in the work tree, staged or not, is left as it was.
    """
    new = read_json((git.worktree / folder / JSON_FILE).read_bytes())
    old = read_json(committed_file(git, "HEAD", folder / JSON_FILE))
    names = (JSON_FILE, MARKDOWN_FILE)
    if old is not None and new is not None and content_key(old) == content_key(new):
        _restore(git, folder, names)
        log.info("status report unchanged; nothing to commit")
        return None
    message = commit_message(old, new or {})
    files = {name: (git.worktree / folder / name).read_bytes() for name in names}
    git("add", "--all", "--", str(folder))
    record(git, folder, message, author)
    sha = git("rev-parse", "HEAD").strip()
    log.info("committed the status report: %s", message.splitlines()[0])
    return ReportCommit(sha, folder, message, author, files)


def record(git: Git, folder: PurePosixPath, message: str, author: Author,
           amend: bool = False) -> None:
    """Commit what is staged under ``folder`` and nothing else (``amend``: into HEAD,
    whose message becomes ``message``)."""
    # The report is machine-written: hooks meant for people's commits must not block it.
    args = [*author.config(), "commit", "--quiet", "--no-verify", f"--author={author}"]
    args += ["--amend"] if amend else []
    git(*args, "--message", message, "--", str(folder))


def committed_file(git: Git, rev: str, path: PurePosixPath) -> bytes | None:
    """The bytes of ``path`` at ``rev``, or None when it is not there (or there is no rev)."""
    return git.read(rev, path.as_posix())


def read_json(data: bytes | None) -> dict | None:
    if data is None:
        return None
    try:
        found = json.loads(data)
    except ValueError:
        return None  # a broken committed report is simply replaced
    return found if isinstance(found, dict) else None


def _restore(git: Git, folder: PurePosixPath, names: tuple[str, ...]) -> None:
    """Put back the committed report files, so that an unchanged run leaves a clean tree."""
    tracked = [str(folder / name) for name in names
               if committed_file(git, "HEAD", folder / name) is not None]
    if tracked:
        try:
            git("checkout", "HEAD", "--", *tracked)
        except GitError as err:  # the new files are as good: keep them
            log.warning("could not restore the committed report: %s", err)


# -- the message ---------------------------------------------------------------------


def commit_message(old: dict | None, new: dict) -> str:
    """A subject of at most 72 characters saying what moved, and the details in the body."""
    if old is None:
        components = sum(len(s["components"]) for s in new.get("services", []))
        subject = f"{PREFIX}first status report ({components} components)"
        return _join(subject, [], new)
    moves = component_changes(old, new)
    others = other_changes(old, new)
    if moves:
        noun = "component" if len(moves) == 1 else "components"
        subject = fit_subject(f"{PREFIX}{len(moves)} {noun} moved", [m.short for m in moves])
    elif others:
        subject = fit_subject(f"{PREFIX}report updated", others)
    else:
        subject = f"{PREFIX}status report updated"
    return _join(subject, [f"- {m.long}" for m in moves] + [f"- {o}" for o in others], new)


def _join(subject: str, lines: list[str], new: dict) -> str:
    summary = (new.get("summary") or {}).get("text")
    tail = [f"Now: {summary}"] if summary else []
    if new.get("generatedAt"):
        tail.append(f"Generated at {new['generatedAt']} (cluster time).")
    body = "\n".join(lines + ([""] if lines and tail else []) + tail)
    return f"{subject}\n\n{body}\n" if body else f"{subject}\n"


def fit_subject(head: str, items: list[str]) -> str:
    """``head (item, item, ...)`` with as many items as fit in SUBJECT_LIMIT characters."""
    for count in range(len(items), 0, -1):
        more = ", ..." if count < len(items) else ""
        text = f"{head} ({', '.join(items[:count])}{more})"
        if len(text) <= SUBJECT_LIMIT:
            return text
    return head[:SUBJECT_LIMIT]


@dataclass(frozen=True)
class ComponentChange:
    """What changed in one component between two reports, for a commit message."""

    short: str  # for the subject: the component and its most telling change
    long: str   # for the body: every change


def _components(report: dict) -> dict[ComponentKey, dict]:
    return {ComponentKey(s["namespace"], s["name"], c["component"]): c
            for s in report.get("services", []) for c in s["components"]}


def component_changes(old: dict, new: dict) -> list[ComponentChange]:
    """What changed per component, in the report's order (added and removed ones too).

    The subject drops the namespace to fit 72 characters; the body has it.
    """
    before, after = _components(old), _components(new)
    moves = []
    for key, component in after.items():
        full, short = _names(key)
        if key not in before:
            moves.append(ComponentChange(f"{short} added", f"{full}: added ({_state(component)})"))
        elif component != before[key]:
            parts = _changes(before[key], component)
            moves.append(ComponentChange(f"{short} {parts[0]}", f"{full}: {', '.join(parts)}"))
    # A component gone from the repository whose InferenceReplica is still there (a run
    # without --prune keeps its Instances) is orphaned, not removed: it still serves.
    orphaned = set(new.get("unknownReplicas") or [])
    for key in before:
        if key in after:
            continue
        full, short = _names(key)
        if f"{key[0]}/{replica_name(key[1], key[2])}" in orphaned:
            moves.append(ComponentChange(f"{short} orphaned", f"{full}: orphaned, still serving (no "
                              "longer in the repository; --prune tears it down)"))
        else:
            moves.append(ComponentChange(f"{short} removed", f"{full}: removed"))
    return moves


def _names(key: ComponentKey) -> tuple[str, str]:
    namespace, name, component = key
    return f"{namespace}/{name} {component}", f"{name} {component}"


def _changes(old: dict, new: dict) -> list[str]:
    """The changes of one component, the most telling first."""
    parts = []
    if (old.get("ready"), old.get("desired")) != (new.get("ready"), new.get("desired")):
        parts.append(f"{_ratio(old)} → {_ratio(new)} ready")
    if old.get("health") != new.get("health"):
        parts.append(f"{old.get('health') or 'not managed'} → "
                     f"{new.get('health') or 'not managed'}")
    for key, label in (("revision", "revision"), ("currentRevision", "current revision")):
        if old.get(key) != new.get(key):
            parts.append(f"{label} {_short(old.get(key))} → {_short(new.get(key))}")
    if old.get("phaseSummary") != new.get("phaseSummary"):
        parts.append(f"{old.get('phaseSummary') or 'no Instances'} → "
                     f"{new.get('phaseSummary') or 'no Instances'}")
    return parts or ["details changed"]


def _ratio(component: dict) -> str:
    return f"{component.get('ready', 0)}/{component.get('desired', 0)}"


def _short(revision: Any) -> str:
    """``llama-chat-engine-201b9cea`` → ``201b9cea``: the part that differs."""
    return str(revision).rsplit("-", 1)[-1] if revision else "none"


def _state(component: dict) -> str:
    if not component.get("managed"):
        return "not managed"
    return f"{_ratio(component)} ready, {component.get('health')}"


def other_changes(old: dict, new: dict) -> list[str]:
    """Changes outside the components: validation findings, unknown replicas, events."""
    found = []
    for key, label in (("validationErrors", "validation errors"),
                       ("validationWarnings", "validation warnings"),
                       ("unknownReplicas", "unknown InferenceReplicas")):
        more = f"{key}LeftOut"  # what a long list leaves out is counted (report/status.py)
        if old.get(key) != new.get(key) or old.get(more) != new.get(more):
            found.append(f"{label} {len(old.get(key) or []) + old.get(more, 0)} → "
                         f"{len(new.get(key) or []) + new.get(more, 0)}")
    if _events(old) != _events(new):
        found.append("warning events")
    if old.get("repository") != new.get("repository"):
        found.append("repository")
    return found


def _events(report: dict) -> list[str]:
    return sorted(json.dumps(e, sort_keys=True)
                  for s in report.get("services", []) for e in s.get("events", []))
