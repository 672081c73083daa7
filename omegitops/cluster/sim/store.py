"""The simulated cluster's file: its shape, the lock, loading and atomic saving.

State layout (``version`` 1)::

    {
      "version": 1,
      "clock": "2026-09-27T08:00:00Z",
      "resourceVersion": 17,                  # global counter, bumped by every write
      "counters": {"uid": 42, "ip": 7, "event": 3},
      "settings": {"podGroupCRD": false, "pullSeconds": 20},
      "objects": {"Pod": {"ns/name": {...}}, "Node": {"node-0": {...}}, ...},
      "sim": {                                # simulator bookkeeping, never shown as objects
        "pods": {uid: record},                # kubelet and scheduler state per pod
        "nodes": {name: {"images": {image: readyAt}, "downSince": t | null,
                         "lost": bool, "noExecuteSince": {taint key: t},
                         "removed": t}},          # kept after the Node until PodGC ran
        "faults": {"pods": {uid: {...}}, "images": [...], "cordoned": [...]},
        "schedulerDirty": false
      }
    }

Objects stay Kubernetes-shaped; everything the simulator needs besides them
(next transition times, back-offs, fault flags, image caches) lives under ``sim``.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import IO

from omegitops.cluster.errors import LockHeld
from omegitops.util import files
from omegitops.util.errors import ClusterError, os_error_text
from omegitops.util.files import replace_atomically, unwritable_folder
from omegitops.util.times import parse_time

VERSION = 1
START_CLOCK = "2026-09-27T08:00:00Z"
DEFAULT_PULL_SECONDS = 20


def fresh_state(*, podgroups: bool = False) -> dict:
    """An empty cluster at the fixed start instant (nodes are added by the caller)."""
    return {
        "version": VERSION,
        "clock": START_CLOCK,
        "resourceVersion": 0,
        "counters": {"uid": 0, "ip": 0, "event": 0},
        "settings": {"podGroupCRD": podgroups, "pullSeconds": DEFAULT_PULL_SECONDS},
        "objects": {},
        "sim": {
            "pods": {},
            "nodes": {},
            "faults": {"pods": {}, "images": [], "cordoned": []},
            "schedulerDirty": False,
        },
    }


class StateError(ValueError):
    """The file holds JSON that is not a simulated cluster state."""


# The latest clock a simulated cluster may show (seconds since the epoch, 9000-01-01).
LATEST_CLOCK = 221845392000.0


def check_shape(state: object) -> None:
    """Raise StateError naming the first thing wrong with a loaded state."""
    if not isinstance(state, dict):
        raise StateError("top level is not an object")
    if state.get("version") != VERSION:
        raise StateError(f"unsupported version {state.get('version')!r}, expected {VERSION}")
    for key, kind in (("objects", dict), ("sim", dict), ("counters", dict), ("settings", dict),
                      ("resourceVersion", int), ("clock", str)):
        if not isinstance(state.get(key), kind):
            raise StateError(f"{key!r} is missing or not a {kind.__name__}")
    try:
        clock = parse_time(state["clock"])
    except (ValueError, OverflowError):
        raise StateError(f"clock {state['clock']!r} is not an RFC3339 time") from None
    if clock > LATEST_CLOCK:
        # Time budgets and deadlines are added to it: past this, the arithmetic overflows.
        raise StateError(f"clock {state['clock']!r} is past the year 9000")
    for kind, objects in state["objects"].items():
        if not isinstance(objects, dict) or not all(isinstance(o, dict) for o in objects.values()):
            raise StateError(f"objects of kind {kind!r} are not a map of objects")
        for key, obj in objects.items():
            meta = obj.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
                raise StateError(f"{kind} {key!r} has no metadata.name")
    sim = state["sim"]
    for key in ("pods", "nodes", "faults"):
        if not isinstance(sim.get(key), dict):
            raise StateError(f"'sim.{key}' is missing or not an object")


# A simulated cluster of 10,000 services is a few hundred megabytes.
MAX_STATE_BYTES = 4 << 30


def load_state(path: Path) -> dict | None:
    """The state in ``path``; None when the file does not exist."""
    try:
        # Bounded, and only a regular file: a FIFO would block and /dev/zero never end.
        raw = files.read_limited(path, MAX_STATE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ClusterError(f"{path}: cannot read the simulated cluster ({err.strerror})") from err
    except files.NotARegularFile as err:
        raise ClusterError(f"{path}: cannot read the simulated cluster ({err.message}); "
                           "refusing to use or overwrite it") from err
    try:
        state = json.loads(raw)
        check_shape(state)
    except (ValueError, UnicodeDecodeError) as err:
        reason = err.args[0] if isinstance(err, StateError) else f"invalid JSON: {err}"
        raise ClusterError(
            f"{path}: not a valid simulated cluster state ({reason}); refusing to overwrite it"
        ) from err
    return state


def save_state(path: Path, state: dict) -> None:
    """Write atomically: a temporary file beside ``path``, fsync, then rename over it.

    A crash at any moment leaves either the old file or the new one, never a mix.
    """
    # Serialise first (compact, and faster than json.dump's many small writes): an object
    # that is not JSON then fails before any file exists.
    data = json.dumps(state, separators=(",", ":")).encode()
    try:
        replace_atomically(path, data)
    except OSError as err:
        raise ClusterError(f"the simulated cluster could not be saved: {os_error_text(err)}; "
                           f"{path} keeps its state from before") from err


def check_writable(path: Path) -> None:
    """Refuse, before anything is done, a state file whose folder cannot take the
    save at the end (read-only, a file where the folder should be, no such mount)."""
    refused = unwritable_folder(path.parent)
    if refused is not None:
        raise ClusterError(f"{path}: the simulated cluster cannot be saved there "
                           f"({refused.strerror or refused}); nothing was done")


class FileLock:
    """An exclusive, non-blocking ``flock`` on ``PATH.lock`` holding the owner's pid.

    flock belongs to the open file description, so a second open of the same
    file is refused even inside one process, and the kernel drops the lock
    when the process dies: a stale lock file never blocks anyone.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        folder = self.path.parent
        if folder.is_file():
            raise ClusterError(f"{folder} is a file, not a folder: no simulated cluster can "
                               "be kept there; nothing was done")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # "a+" neither truncates nor fails: the holder's pid stays readable until we own it.
            handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release()
        except OSError as err:
            raise ClusterError(f"cannot lock the simulated cluster: {os_error_text(err)}; "
                               "nothing was done") from err
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise LockHeld(
                f"{self.path}: the simulated cluster is in use by another process (pid {holder})"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._file = handle

    def release(self) -> None:
        # The file itself stays: unlinking a lock file lets two processes lock two inodes.
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
