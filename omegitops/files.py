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
