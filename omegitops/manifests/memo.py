"""What loading and validating a repository found for inputs seen before, by content.

A converged fleet's files do not change from one run to the next, yet each run read
them into node trees, checked them against the schemas, resolved and rendered every
component and built its derived names: most of a pass. The memo keeps, for each input
seen before, what that work found, keyed by what the work read:

- a file, by its bytes: the data of each document and its line, for files whose every
  document was read cleanly (an error's file is read again, so the error is placed
  exactly as before);
- a manifest's own checks (schemas, budgets over 100%, durations), by its file and
  place in it: whether it passed;
- a service's checks against its runtime and the operator settings, by the service's
  and its runtime's files and places and the settings: the warnings, and each
  component's resolved lifecycle and rendered pod templates.

The memo carries the code's own fingerprint (the bytes of the package) and is read
only by the same code, so an upgraded omegitops never reads what an older one found. A document read from the memo
has no node tree; when an error or warning needs the line of one of its fields, the
file is composed again (``Document.line_of``).

The memo is a file in the cache folder (``--cache-dir``, ``OMEGITOPS_CACHE_DIR``, else
the user's cache folder), written only by this program and read by the runs after;
within a run it serves every load (``plan --base`` loads the base and the head: their
unchanged files are read once). A memo that cannot be read or written only costs the
work it would have saved; with no folder (an empty ``OMEGITOPS_CACHE_DIR``, as the
shipped pods start with nothing to keep) there is no memo, and nothing is kept for it.
"""

from __future__ import annotations

import hashlib
import logging
import marshal
import os
import pickle
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# The memo's own layout; a change here makes older memos unreadable (and unread).
FORMAT = 1
FILE_NAME = "load-memo.pickle"
# Saves an entry may go unused before it is dropped: shards and branches that run
# from one cache keep theirs, a file long gone does not stay for ever.
KEEP_UNUSED_SAVES = 8
# A memo this large is not written: the cache must never cost more than it saves.
MAX_BYTES = 1 << 30
ENV_CACHE_DIR = "OMEGITOPS_CACHE_DIR"


def default_cache_dir() -> Path | None:
    """``OMEGITOPS_CACHE_DIR`` (empty: no memo), else ``$XDG_CACHE_HOME`` or
    ``~/.cache``, under ``omegitops``."""
    if ENV_CACHE_DIR in os.environ:
        chosen = os.environ[ENV_CACHE_DIR]
        return Path(chosen) if chosen else None
    home = os.path.expanduser("~")
    if not os.path.isabs(home):  # no home folder (a uid the image does not name)
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return Path(base) / "omegitops"


_CODE: str | None = None


def code_fingerprint() -> str:
    """A digest of the package's own files: what found the memo's entries."""
    global _CODE
    if _CODE is None:
        root = Path(__file__).resolve().parent.parent
        digest = hashlib.sha256(str(FORMAT).encode())
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".json", ".j2") and path.is_file():
                digest.update(path.relative_to(root).as_posix().encode())
                digest.update(path.read_bytes())
        _CODE = digest.hexdigest()[:32]
    return _CODE


def content_key(raw: bytes) -> str:
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


@dataclass
class _Entries:
    # file key -> marshal bytes of [(index, line, data), ...]
    files: dict[str, bytes] = field(default_factory=dict)
    # (file key, place) of manifests whose own checks passed
    own: set[tuple[str, int]] = field(default_factory=set)
    # service key -> (warnings, resolved, managed), or its pickle bytes as read
    services: dict[str, Any] = field(default_factory=dict)
    # key -> the save at which it was last used
    used: dict[Any, int] = field(default_factory=dict)
    saves: int = 0


class LoadMemo:
    """The memo of one cache folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._held: _Entries | None = None
        self._changed = False
        self.hits = 0
        self.misses = 0

    @property
    def _entries(self) -> _Entries:
        if self._held is None:
            self._held = _read(self.folder)
        return self._held

    def release(self) -> None:
        """Let go of the entries once saved (a tenth of a big fleet's loaded repository):
        the pass that follows needs none of them, and a later load reads them again."""
        if not self._changed:
            self._held = None

    # -- files --------------------------------------------------------------------

    def documents(self, key: str) -> list[tuple[int, int, Any]] | None:
        """The (index, line, data) of each document of the file with these bytes, as
        fresh copies."""
        packed = self._entries.files.get(key)
        if packed is None:
            self.misses += 1
            return None
        self.hits += 1
        self._use(key)
        return marshal.loads(packed)

    def remember_documents(self, key: str, documents: list[tuple[int, int, Any]]) -> None:
        try:
            self._entries.files[key] = marshal.dumps(documents)
        except ValueError:  # not JSON-shaped: nothing validated holds it, so never reused
            return
        self._use(key)
        self._changed = True

    # -- a manifest's own checks ----------------------------------------------------

    def own_checks_passed(self, source: tuple[str, int] | None) -> bool:
        if source is None or source not in self._entries.own:
            return False
        self._use(source)
        return True

    def remember_own_checks_passed(self, source: tuple[str, int] | None) -> None:
        if source is not None and source not in self._entries.own:
            self._entries.own.add(source)
            self._use(source)
            self._changed = True

    # -- a service against its runtime and the settings --------------------------------

    def service(self, key: str | None) -> Any:
        stored = self._entries.services.get(key) if key is not None else None
        if stored is None:
            return None
        if isinstance(stored, bytes):  # as read from the folder
            try:
                stored = pickle.loads(stored)
            except Exception:  # noqa: BLE001 - a memo that cannot be read is work again
                return None
        self._use(key)
        return stored

    def remember_service(self, key: str | None, found: tuple) -> None:
        """Keep what a service's checks found: values nobody changes (frozen lifecycles,
        packed templates, errors), held as they are and pickled only when saved."""
        if key is None:
            return
        self._entries.services[key] = found
        self._use(key)
        self._changed = True

    # -- storage ----------------------------------------------------------------------

    def _use(self, key: Any) -> None:
        self._entries.used[key] = self._entries.saves

    def save(self) -> None:
        """Write the memo to its folder, if anything is new; entries left unused for
        ``KEEP_UNUSED_SAVES`` saves go. Never raises: a cache is only a cache."""
        if not self._changed:
            return
        entries = self._entries
        entries.saves += 1
        oldest = entries.saves - KEEP_UNUSED_SAVES
        kept = {k: s for k, s in entries.used.items() if s >= oldest}
        temp = None
        try:
            state = {
                "code": code_fingerprint(),
                "files": {k: v for k, v in entries.files.items() if k in kept},
                "own": {k for k in entries.own if k in kept},
                # Each service pickled apart: a run unpickles only the ones it meets.
                "services": {k: v if isinstance(v, bytes) else
                             pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)
                             for k, v in entries.services.items() if k in kept},
                "used": kept,
                "saves": entries.saves,
            }
            data = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
            if len(data) > MAX_BYTES:
                log.debug("load memo of %d bytes not written", len(data))
                return
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            handle, temp = tempfile.mkstemp(dir=self.folder, prefix=".memo-")
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temp, self.folder / FILE_NAME)
            temp = None
            self._changed = False
        except Exception as err:  # noqa: BLE001 - a memo not written is only work again
            log.debug("load memo not written to %s: %s", self.folder, err)
        finally:
            if temp is not None:
                Path(temp).unlink(missing_ok=True)


def _read(folder: Path) -> _Entries:
    try:
        with open(folder / FILE_NAME, "rb") as stored:
            if not _ours(os.fstat(stored.fileno())):
                log.warning("load memo %s not read: another user can write it",
                            folder / FILE_NAME)
                return _Entries()
            state = pickle.load(stored)
        if not isinstance(state, dict) or state.get("code") != code_fingerprint():
            return _Entries()
        return _Entries(files=state["files"], own=state["own"], services=state["services"],
                        used=state["used"], saves=state["saves"])
    except FileNotFoundError:
        return _Entries()
    except Exception as err:  # noqa: BLE001 - a memo that cannot be read is an empty one
        log.debug("load memo in %s not read: %s", folder, err)
        return _Entries()


def _ours(stat: os.stat_result) -> bool:
    """Whether only this user could have written the memo: a pickle is code, and one
    planted in a shared folder must never be read."""
    return stat.st_uid == os.getuid() and not stat.st_mode & 0o022


_MEMOS: dict[Path, LoadMemo] = {}


def forget(folder: Path) -> None:
    """Drop the process's memo of ``folder``: the next load starts from what the folder
    holds, as a new run's process does."""
    _MEMOS.pop(folder.resolve(), None)


def memo_for(folder: Path) -> LoadMemo:
    """The process's memo of ``folder``."""
    key = folder.resolve()
    memo = _MEMOS.get(key)
    if memo is None:
        memo = _MEMOS[key] = LoadMemo(key)
    return memo
