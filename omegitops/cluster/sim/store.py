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
                         "removed": t,        # kept after the Node until PodGC ran
                         "draining": t, "drained": t}},  # the drain fault
        "faults": {"pods": {uid: {...}}, "images": [...], "cordoned": [...]},
        "schedulerDirty": false
      }
    }

Objects stay Kubernetes-shaped; everything the simulator needs besides them
(next transition times, back-offs, fault flags, image caches) lives under ``sim``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from pathlib import Path
from typing import IO, Any

import orjson

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
            _check_fields(f"{kind} {key}.metadata", meta, _METADATA, required=False)
    sim = state["sim"]
    for key in ("pods", "nodes", "faults"):
        if not isinstance(sim.get(key), dict):
            raise StateError(f"'sim.{key}' is missing or not an object")
    _check_fields("counters", state["counters"], _COUNTERS)
    _check_fields("settings", state["settings"], _SETTINGS)
    _check_fields("sim", sim, _SIM, required=False)
    _check_pods(state["objects"].get("Pod", {}), sim["pods"])
    for name, nrec in sim["nodes"].items():
        _check_fields(f"sim.nodes.{name}", nrec, _NODE_RECORD, required=False)
    _check_fields("sim.faults", sim["faults"], _FAULTS)
    for uid, flags in sim["faults"]["pods"].items():
        if not isinstance(flags, dict):
            raise StateError(f"'sim.faults.pods.{uid}' is not an object")


# The fields the simulator reads by name, and the types it expects of them (a
# hand-edited file is refused here, in one line, not deep in a pass with a traceback).
_NUMBER = (int, float)
_TIME = (int, float, type(None))


def _fields(kinds_of: dict) -> dict[str, tuple[frozenset, str]]:
    """Field name -> (the exact classes a value may have, their names for an error).

    Compared by exact class, as a JSON decoder builds them: one set lookup per field
    where ``isinstance`` took two calls (a bool is an int to Python, not here), over the
    tens of thousands of records of a large fleet's file."""
    out = {}
    for key, kinds in kinds_of.items():
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        out[key] = (frozenset(kinds),
                    " or ".join("null" if k is type(None) else k.__name__ for k in kinds))
    return out


_METADATA = _fields({"namespace": str, "labels": dict, "annotations": dict, "uid": str})
_COUNTERS = _fields({"uid": int, "ip": int, "event": int})
_SETTINGS = _fields({"pullSeconds": _NUMBER})
_SIM = _fields({"schedulerDirty": bool})
_NODE_RECORD = _fields({"images": dict, "downSince": _TIME, "next": _TIME, "lost": bool,
                        "noExecuteSince": dict, "removed": _TIME, "draining": _TIME,
                        "drained": _TIME})
_FAULTS = _fields({"pods": dict, "images": list, "cordoned": list})
_POD_RECORD = _fields({"node": (str, type(None)), "tried": bool, "message": str,
                       "ip": (str, type(None)), "startTime": _TIME, "init": int,
                       "inits": list, "containers": list, "terminating": _TIME,
                       "deadline": _TIME, "evicted": (dict, type(None)), "next": _TIME,
                       "requests": dict})
_CONTAINER_RECORD = _fields({"name": str, "image": str, "phase": str, "since": _TIME,
                             "until": _TIME, "startupAt": _TIME, "readyAt": _TIME,
                             "stopAt": _TIME, "restarts": int, "backoff": _NUMBER,
                             "pullBackoff": _NUMBER, "everStarted": bool,
                             "stopping": bool})
_ABSENT = object()


def _check_fields(where: str, record: object, fields: dict[str, tuple[frozenset, str]],
                  required: bool = True) -> None:
    """Each field of ``fields`` present (when ``required``) and of its type; a bool is
    no number here, as it is for Python."""
    if record.__class__ is not dict:
        raise StateError(f"{where!r} is not an object")
    for key, (kinds, names) in fields.items():
        value = record.get(key, _ABSENT)  # type: ignore[attr-defined]
        if value.__class__ in kinds:
            continue
        if value is _ABSENT:
            if required:
                raise StateError(f"'{where}.{key}' is missing")
            continue
        raise StateError(f"'{where}.{key}' is {json.dumps(value)[:40]}, not {names}")


def _check_pods(pods: dict, records: dict) -> None:
    """Every Pod with a uid and containers, and one simulator record each, and back."""
    uids = set()
    for key, pod in pods.items():
        uid = pod["metadata"].get("uid")
        spec = pod.get("spec")
        if not isinstance(uid, str):
            raise StateError(f"Pod {key!r} has no metadata.uid")
        if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
            raise StateError(f"Pod {key!r} has no spec.containers")
        if uid not in records:
            raise StateError(f"Pod {key!r} has no record under 'sim.pods'")
        uids.add(uid)
    for uid, rec in records.items():
        if uid not in uids:
            raise StateError(f"'sim.pods.{uid}' is the record of no Pod")
        _check_fields(f"sim.pods.{uid}", rec, _POD_RECORD)
        for part in ("inits", "containers"):
            for index, container in enumerate(rec[part]):
                _check_fields(f"sim.pods.{uid}.{part}[{index}]", container, _CONTAINER_RECORD)


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
        state = _decoded(raw)
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
    data = _encoded(state)
    try:
        replace_atomically(path, data)
    except OSError as err:
        raise ClusterError(f"the simulated cluster could not be saved: {os_error_text(err)}; "
                           f"{path} keeps its state from before") from err


# What a state the standard library wrote begins with (JSON allows white space first):
# it holds what orjson does not take, so it is read by the standard library again.
_STANDARD = b" "


def _decoded(raw: bytes) -> Any:
    """The state read: by orjson (the same objects in half the time of the standard
    library's on the tens of megabytes of a large fleet, the collector paused for both,
    and each repeated key one string), unless the standard library wrote it
    (``_STANDARD``: orjson would read an integer past 64 bits as a float; a file edited
    by hand to hold one is read as orjson reads it, and a counter then refused as no
    integer) or orjson refuses it (NaN; a file that is not JSON, whose error the
    standard library words)."""
    if raw[:1] != _STANDARD:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def _encoded(state: dict) -> bytes:
    """The state as compact JSON: by orjson when it takes it (the same bytes, six times
    faster on the tens of megabytes of a large fleet: the simulator's own cost, which a
    real cluster does not have), else by the standard library (an integer past 64
    bits), marked to be read by it (``_STANDARD``)."""
    try:
        return orjson.dumps(state)
    except TypeError:
        return _STANDARD + json.dumps(state, separators=(",", ":")).encode()


def check_writable(path: Path) -> None:
    """Refuse, before anything is done, a state file whose folder cannot take the
    save at the end (read-only, a file where the folder should be, no such mount)."""
    refused = unwritable_folder(path.parent)
    if refused is not None:
        raise ClusterError(f"{path}: the simulated cluster cannot be saved there "
                           f"({refused.strerror or refused}); nothing was done")


# How much of a held lock file is read for the holder's pid.
_HOLDER_BYTES = 64


def _lock_handle(path: Path, fd: int) -> IO[bytes]:
    """The opened lock file, when it is a regular file (a folder cannot be opened for
    writing; a FIFO or device here is no lock file either)."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ClusterError(f"{path}: the simulated cluster's lock file is not a regular file "
                           "(a device, socket or pipe); remove it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "r+b", buffering=0)


class FileLock:
    """An exclusive, non-blocking ``flock`` on ``PATH.lock`` holding the owner's pid.

    flock belongs to the open file description, so a second open of the same
    file is refused even inside one process, and the kernel drops the lock
    when the process dies: a stale lock file never blocks anyone.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] | None = None

    def acquire(self) -> None:
        folder = self.path.parent
        if folder.is_file():
            raise ClusterError(f"{folder} is a file, not a folder: no simulated cluster can "
                               "be kept there; nothing was done")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # Neither truncated nor refused when it exists: the holder's pid stays readable
            # until we own it. O_NOFOLLOW: a link planted in its place would have the pid
            # written into whatever file it points at.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise ClusterError(f"{self.path}: the simulated cluster's lock file is a "
                                   "symbolic link; refusing to write through it (remove "
                                   "it)") from err
            raise ClusterError(f"cannot lock the simulated cluster: {os_error_text(err)}; "
                               "nothing was done") from err
        handle = _lock_handle(self.path, fd)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            # A pid is a few digits; whatever else a hand put there is not read whole.
            holder = handle.read(_HOLDER_BYTES).decode("utf-8", "replace").strip()
            handle.close()
            shown = holder if holder.isdigit() else "unknown"
            raise LockHeld(
                f"{self.path}: the simulated cluster is in use by another process (pid {shown})"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n".encode())
        handle.flush()
        self._file = handle

    def release(self) -> None:
        # The file itself stays: unlinking a lock file lets two processes lock two inodes.
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
