"""Files: written so that a crash at any moment leaves the old file or the new one, and
read with their size known first."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from omegitops.util.signalmask import signals_held


def replace_atomically(path: Path, data: bytes, mode: int | None = None) -> None:
    """A temporary file beside ``path``, fsync, then rename over it (and fsync the folder,
    which makes the rename itself durable). ``mode``: the file's permissions (default:
    the temporary file's 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            if mode is not None:
                os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def unwritable_folder(folder: Path) -> OSError | None:
    """Why no file can be written into ``folder`` (or, while it does not exist, into the
    nearest folder above it, where it would be made), or None: a file is created there
    and removed. Asked before a run touches anything, so that a read-only or missing
    mount fails the run at its start, not once its work is done."""
    existing = folder
    try:
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
        fd, probe = tempfile.mkstemp(prefix=".omegitops-probe-", dir=existing)
    except OSError as err:
        return err
    os.close(fd)
    os.unlink(probe)
    return None


@contextlib.contextmanager
def temporary_folder(prefix: str, dir: Path | str | None = None) -> Iterator[Path]:
    """A new folder under ``dir`` (default: ``$TMPDIR``), removed with all it holds when
    the block ends, on every path out of it. Making it and removing it are never cut
    in half by SIGINT or SIGTERM (which the orderly stop turns into exceptions): the
    signal is delivered once the folder is gone, so none is left behind."""
    folder: Path | None = None
    try:
        with signals_held():  # a signal is delivered as the block ends: ``folder`` is set
            folder = Path(tempfile.mkdtemp(prefix=prefix, dir=dir))
        yield folder
    finally:
        if folder is not None:
            with signals_held():
                shutil.rmtree(folder, ignore_errors=True)


def _fsync_dir(folder: Path) -> None:
    # Some file systems refuse to fsync a folder, which is harmless here.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# What git quotes in a path (core.quotePath): these by name, other control bytes and
# every byte over 0x7f in octal.
_GIT_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v",
                "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def shown_path(rel: str) -> str:
    """A repository path as git shows it: as is when it is plain, else quoted, with
    control characters and bytes that are not ASCII escaped (``"caf\\303\\251.yaml"``).
    A name that is not UTF-8 (read by Python with surrogate escapes) can then be
    printed and written into the report, and a name with a newline or an escape
    sequence cannot forge a line of output."""
    if rel.isascii() and rel.isprintable() and '"' not in rel and "\\" not in rel:
        return rel
    out = []
    for byte in os.fsencode(rel):
        char = chr(byte)
        if char in _GIT_ESCAPES:
            out.append(_GIT_ESCAPES[char])
        elif byte < 0x20 or byte >= 0x7F:
            out.append(f"\\{byte:03o}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


class NotARegularFile(Exception):
    """A path that is no file to read: a folder, a device, a pipe, or too large."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_CHUNK = 1 << 20


def read_limited(path: Path | str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; NotARegularFile for anything else.

    The size is known before a byte is read, and never more than one byte past the
    limit is read: a 1 GB file costs nothing, and a link to ``/dev/zero`` (which
    reports no size and never ends) or to a FIFO (which blocks) is refused unread.
    OSError (missing, unreadable) is the caller's to report.
    """
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise NotARegularFile("a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile("not a regular file (a device, socket or pipe); not read")
        if info.st_size > max_bytes:
            raise NotARegularFile(f"file is {info.st_size} bytes, larger than the limit of {max_bytes}")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:
        # A read asks for a buffer of the size it is given: the file's size (and one byte
        # more, to see it grow), never the limit, which may be more than the memory allowed.
        data = handle.read(info.st_size + 1)
        if len(data) > info.st_size:  # it grows while being read: the rest, a chunk at a time
            chunks = [data]
            read = len(data)
            while read <= max_bytes and (chunk := handle.read(min(_CHUNK, max_bytes + 1 - read))):
                chunks.append(chunk)
                read += len(chunk)
            data = b"".join(chunks)
    if len(data) > max_bytes:  # it grew while being read
        raise NotARegularFile(f"file is larger than the limit of {max_bytes} bytes")
    return data
