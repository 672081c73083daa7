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

What is read from the folder is trusted no further than the folder: a memo another user
could have written or planted is never read, and a folder another user could write
into (other than one that is ours and sticky, where no one else can replace our file)
is not used at all, with a warning. The memo file is opened without following a link,
and read only when the opened file is a regular file of this user that no one else
can write; it is written under a private temporary name in the folder and renamed
over the old one, so no reader ever sees half of it.

Its format is data, not code: marshal of plain values (dicts, lists, tuples, sets,
strings, numbers, bytes, None), behind a header naming the format, the code's
fingerprint and a digest of the body. Loading marshal data only builds values (it
calls nothing; a code object, which this program never writes, would be only a value
and fails the shape checks), unlike pickle, whose loading runs whatever callables the
bytes name. Marshal rather than JSON because the memo holds bytes (each file's
documents and each component's pod templates are kept as marshal bytes, decoded only
when used) and is read whole at the start of every run: marshal reads it several times
faster than ``json`` would, which is the memo's whole point. Marshal is not hardened
against hostile bytes, which is why only a file of ours that no one else could write is
read; the digest and the shape checks on each entry (``findings.py``) make a damaged
memo a miss, not a crash.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import marshal
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, cast

log = logging.getLogger(__name__)

# The memo's own layout; a change here makes older memos unreadable (and unread).
FORMAT = 2
FILE_NAME = "load-memo.marshal"
# The file's first line: the format, the code's fingerprint and the body's digest.
MAGIC = b"omegitops-load-memo"
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
    # service key -> its finding as ``findings.pack`` wrote it
    services: dict[str, bytes] = field(default_factory=dict)
    # key -> the save at which it was last used
    used: dict[Any, int] = field(default_factory=dict)
    saves: int = 0


class LoadMemo:
    """The memo of one cache folder; with no folder, of this process only (the carried
    memo, ``carried.py``, fills it and takes what the run used from it)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        # Why the folder is not used (another user can write it), once found.
        self.refused: str | None = None
        self._held: _Entries | None = None
        self._changed = False
        self.hits = 0
        self.misses = 0
        # Services whose checks the memo answered.
        self.service_hits = 0
        # The entries this process used or added: what a carried memo takes on.
        self.touched: set[Any] = set()

    @property
    def _entries(self) -> _Entries:
        if self._held is None:
            self._held = self._read()
        return self._held

    def release(self) -> None:
        """Let go of the entries once saved (a tenth of a big fleet's loaded repository):
        the pass that follows needs none of them, and a later load reads them again."""
        if not self._changed and self.folder is not None:
            self._held = None

    def carry_in(self, files: dict[str, bytes], own: set[tuple[str, int]],
                 services: dict[str, bytes]) -> None:
        """Add what a carried memo holds, under what the folder's memo holds: an entry
        is the same finding whichever memo has it, since both are keyed by content."""
        entries = self._entries
        for key, value in files.items():
            entries.files.setdefault(key, value)
        entries.own |= own
        for key, value in services.items():
            entries.services.setdefault(key, value)

    def used_entries(self) -> tuple[dict[str, bytes], set[tuple[str, int]], dict[str, bytes]]:
        """(files, own checks, services) this process used or added: what the next run
        reads again if its inputs are the same."""
        entries, touched = self._entries, self.touched
        return ({k: v for k, v in entries.files.items() if k in touched},
                {k for k in entries.own if k in touched},
                {k: v for k, v in entries.services.items() if k in touched})

    # -- files --------------------------------------------------------------------

    def documents(self, key: str) -> list[tuple[int, int, Any]] | None:
        """The (index, line, data) of each document of the file with these bytes, as
        fresh copies."""
        packed = self._entries.files.get(key)
        if packed is None:
            self.misses += 1
            return None
        try:
            documents = marshal.loads(packed)
            if not (isinstance(documents, list) and all(_document(d) for d in documents)):
                raise ValueError("not a list of (index, line, data)")
        except Exception as err:  # noqa: BLE001 - damaged: the file is read again
            log.debug("load memo entry not read: %s", err)
            self.misses += 1
            return None
        self.hits += 1
        self._use(key)
        return documents

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

    def service(self, key: str) -> bytes | None:
        """What a service's checks found (``findings.pack``'s bytes), if remembered."""
        stored = self._entries.services.get(key)
        if stored is not None:
            self.service_hits += 1
            self._use(key)
        return stored

    def remember_service(self, key: str, found: bytes) -> None:
        """Keep what a service's checks found, packed as plain data (``findings.pack``)."""
        self._entries.services[key] = found
        self._use(key)
        self._changed = True

    # -- storage ----------------------------------------------------------------------

    def _use(self, key: Any) -> None:
        self._entries.used[key] = self._entries.saves
        self.touched.add(key)

    def save(self) -> None:
        """Write the memo to its folder, if anything is new; entries left unused for
        ``KEEP_UNUSED_SAVES`` saves go. Never raises: a cache is only a cache."""
        if not self._changed or self.folder is None:
            return
        entries = self._entries
        entries.saves += 1
        oldest = entries.saves - KEEP_UNUSED_SAVES
        kept = {k: s for k, s in entries.used.items() if s >= oldest}
        try:
            body = marshal.dumps({
                "files": {k: v for k, v in entries.files.items() if k in kept},
                "own": {k for k in entries.own if k in kept},
                "services": {k: v for k, v in entries.services.items() if k in kept},
                "used": kept,
                "saves": entries.saves,
            })
            if len(body) > MAX_BYTES:
                log.debug("load memo of %d bytes not written", len(body))
                return
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            with _Folder(self.folder) as folder:
                if self._refuse(folder.stat):
                    return
                folder.replace(FILE_NAME, _header(body) + body)
            self._changed = False
        except Exception as err:  # noqa: BLE001 - a memo not written is only work again
            log.debug("load memo not written to %s: %s", self.folder, err)

    def _read(self) -> _Entries:
        if self.folder is None:
            return _Entries()
        try:
            with _Folder(self.folder) as folder:
                if self._refuse(folder.stat):
                    return _Entries()
                data = folder.read_ours(FILE_NAME)
            return _entries_of(data) if data is not None else _Entries()
        except FileNotFoundError:
            return _Entries()
        except Exception as err:  # noqa: BLE001 - a memo that cannot be read is an empty one
            log.debug("load memo in %s not read: %s", self.folder, err)
            return _Entries()

    def _refuse(self, folder: os.stat_result) -> bool:
        """Whether the folder is one another user can write into (warned of once)."""
        if self.refused is None:
            why = _unsafe_folder(folder)
            if why is None:
                return False
            self.refused = why
            log.warning("load memo folder %s not used: %s; running without the memo",
                        self.folder, why)
        return True


def _unsafe_folder(folder: os.stat_result) -> str | None:
    """Why another user could plant or replace the memo in this folder; None if no one
    but this user (and root) can."""
    if folder.st_uid not in (os.getuid(), 0):
        return f"it belongs to uid {folder.st_uid}"
    if folder.st_mode & 0o022:
        if folder.st_mode & stat.S_ISVTX and folder.st_uid == os.getuid():
            return None  # sticky: others may add files, never replace or remove ours
        return "other users can write it (make it 0700, or sticky)"
    return None


def _ours(found: os.stat_result) -> bool:
    """Whether only this user could have written the memo: a regular file of ours that
    no one else can write."""
    return (stat.S_ISREG(found.st_mode) and found.st_uid == os.getuid()
            and not found.st_mode & 0o022)


class _Folder:
    """The cache folder, opened once: the checks and the reads and writes are all made
    on the same folder, even if its path is swapped meanwhile."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        self.stat = os.fstat(self.fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def read_ours(self, name: str) -> bytes | None:
        """The file's bytes if it is ours (``_ours``); never through a link, never
        waiting on a pipe planted there."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=self.fd)
        except OSError as err:
            if err.errno == errno.ELOOP:
                log.warning("load memo %s not read: it is a link", self.path / name)
                return None
            raise
        with os.fdopen(fd, "rb") as stored:
            if not _ours(os.fstat(fd)):
                log.warning("load memo %s not read: not a file of this user's that only "
                            "it can write", self.path / name)
                return None
            return stored.read()

    def replace(self, name: str, data: bytes) -> None:
        """Write ``name`` whole: into a new private file, renamed over the old one."""
        temp = f".memo-{secrets.token_hex(8)}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                     dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            os.unlink(temp, dir_fd=self.fd)
            raise


def _header(body: bytes | memoryview) -> bytes:
    digest = hashlib.blake2b(body, digest_size=16).hexdigest()
    return b"%s %d %s %s\n" % (MAGIC, FORMAT, code_fingerprint().encode(), digest.encode())


def _entries_of(data: bytes) -> _Entries:
    """The entries of a memo file's bytes; none for a memo of another format or code,
    or one whose body is damaged or not shaped as this code writes it."""
    end = data.find(b"\n", 0, 256)
    view = memoryview(data)[end + 1:]
    if end < 0 or data[:end + 1] != _header(view):
        return _Entries()
    state = marshal.loads(view)
    if not isinstance(state, dict):
        return _Entries()
    files, own, services = state.get("files"), state.get("own"), state.get("services")
    used, saves = state.get("used"), state.get("saves")
    if not (_mapping(files, bytes) and _mapping(services, bytes)
            and isinstance(own, set) and all(_source(k) for k in own)
            and isinstance(used, dict) and isinstance(saves, int)
            and all(isinstance(s, int) for s in used.values())):
        log.debug("load memo not read: its content is not shaped as written")
        return _Entries()
    return _Entries(files=cast(dict, files), own=own, services=cast(dict, services),
                    used=used, saves=saves)


def _mapping(value: Any, kind: type) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, kind) for k, v in value.items())


def _document(value: Any) -> bool:
    return (isinstance(value, tuple) and len(value) == 3 and isinstance(value[0], int)
            and isinstance(value[1], int))


def _source(value: Any) -> bool:
    return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], int))


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
