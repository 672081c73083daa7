"""Writing files so that a crash at any moment leaves the old file or the new one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
