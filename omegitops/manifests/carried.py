"""The load memo carried from one run to the next beside the report, for pods that
keep no folder between runs.

The shipped CronJob and Argo pods start empty: no cache folder outlives them, so
every run paid the cold path (``memo.py``). What they do keep is the report branch,
which each run fetches and commits to. The carried memo is a file there, beside the
report (``.load-memo.json`` in the report folder): at its end a run writes what its
load memo used or found, and the next run, a new pod, reads it before loading.

The branch is not this program's own folder: anyone holding a token that can push to
it could write the file. So what is read is trusted no further than its signature:

- the format is JSON (orjson), whose reading only builds values (dicts, lists,
  strings, numbers, booleans, None); the marshal bytes the in-process memo keeps are
  made here from those values, never read from the file;
- the file is signed with HMAC-SHA256 under a key only the job has (``OMEGITOPS_MEMO_KEY``,
  from a Secret the pipelines mount): without a key no memo is carried (said at DEBUG);
  a file whose signature does not match (another key, or a change) is not read, with a
  WARNING;
- it names the code's fingerprint (``memo.code_fingerprint``): a memo another version
  wrote is not read, as the cache folder's is not;
- a file larger than ``MAX_BYTES``, or damaged, or whose entries are not shaped as
  this code writes them, is a miss: the run does the work, as a cold one does.

Every entry is keyed by content (each file's bytes, each service's inputs and the
operator settings), so an old memo replayed by someone who holds no key (a signed file
from an earlier run) only answers what is still the same, and costs misses otherwise.
An entry is carried only if JSON gives back exactly the value it holds (a YAML date or
a map keyed by numbers does not survive JSON: such a file is read again next run).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import marshal
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from omegitops.manifests.memo import LoadMemo, code_fingerprint, memo_for
from omegitops.util.gcpause import without_gc_pauses

log = logging.getLogger(__name__)

FORMAT = 1
# In the report folder, beside status.json and STATUS.md.
FILE_NAME = ".load-memo.json"
MAGIC = b"omegitops-carried-memo"
# Larger is not written, nor read: a repository's branch is no place for more.
MAX_BYTES = 64 << 20
ENV_KEY = "OMEGITOPS_MEMO_KEY"
# Shorter keys are refused: a guessable key would let anyone sign a memo.
MIN_KEY_BYTES = 16


def key_from_env() -> bytes | None:
    """The signing key from ``OMEGITOPS_MEMO_KEY``; None (no carried memo) when unset or
    too short."""
    value = os.environ.get(ENV_KEY, "").strip()
    if not value:
        log.debug("no carried load memo: %s is not set", ENV_KEY)
        return None
    key = value.encode()
    if len(key) < MIN_KEY_BYTES:
        log.warning("no carried load memo: %s is shorter than %d bytes", ENV_KEY,
                    MIN_KEY_BYTES)
        return None
    return key


def _signature(key: bytes, signed: bytes) -> str:
    return hmac.new(key, signed, hashlib.sha256).hexdigest()


def _first_line(code: str) -> bytes:
    return b"%s %d %s" % (MAGIC, FORMAT, code.encode())


# -- writing --------------------------------------------------------------------------

def encode(memo: LoadMemo, key: bytes) -> bytes | None:
    """The signed file of what ``memo`` used or found in this process; None when it
    holds nothing, or more than ``MAX_BYTES``."""
    files, own, services = memo.used_entries()
    if not (files or own or services):
        return None
    parts = [b'"files":{', _join(files, _documents_json), b'},"own":',
             orjson.dumps(sorted(own)), b',"services":{', _join(services, _finding_json),
             b"}"]
    body = b"{" + b"".join(parts) + b"}\n"
    head = _first_line(code_fingerprint())
    if len(body) + len(head) + 80 > MAX_BYTES:
        log.info("carried load memo of %d bytes not written (more than %d)", len(body),
                 MAX_BYTES)
        return None
    return b"%s %s\n%s" % (head, _signature(key, head + b"\n" + body).encode(), body)


def _join(entries: dict[str, bytes], as_json: Callable[[bytes], Any]) -> bytes:
    """``"key":value`` for each entry JSON gives back exactly (no tuple in the data made
    a list, no date a string, no NaN a null, no map keyed by numbers), in key order."""
    out = []
    for key in sorted(entries):
        try:
            value = as_json(entries[key])
            text = orjson.dumps(value)
            if orjson.loads(text) != value:
                continue
        except (TypeError, ValueError):  # orjson's errors are both
            continue
        out.append(orjson.dumps(key) + b":" + text)
    return b",".join(out)


def _documents_json(raw: bytes) -> Any:
    return [list(document) for document in marshal.loads(raw)]


def _finding_json(raw: bytes) -> Any:
    """``findings.pack``'s tuple as lists, each component's templates as their data."""
    warnings, resolved, managed = marshal.loads(raw)
    return [[_listed(w) for w in warnings],
            [[list(sid), component, _lifecycle_json(lifecycle), marshal.loads(templates),
              revision] for sid, component, lifecycle, templates, revision in resolved],
            managed]


def _listed(value: tuple) -> list:
    return [list(part) if isinstance(part, tuple) else part for part in value]


def _resolved_json(value: tuple) -> list:
    found, source, path = value
    return [found, source, list(path)]


def _lifecycle_json(value: tuple) -> list:
    component, mode, shape, worker_size, replicas, named, settings, bounds = value
    retry = settings.get("update_retry")
    return [component, _resolved_json(mode), shape, worker_size, replicas,
            {name: _resolved_json(r) for name, r in named.items()},
            {**settings, "update_retry": None if retry is None else list(retry)},
            None if bounds is None else list(bounds)]


# -- reading --------------------------------------------------------------------------

class Miss(ValueError):
    """A carried memo that is not read."""


# Decoded with the collector paused: the file's hundreds of thousands of values set off
# full collections of all the process holds (on sim:, the whole simulated cluster),
# which took the decoding of a 6 MB memo from 0.03 s to 0.3 s.
@without_gc_pauses
def decode(data: bytes, key: bytes) -> tuple[dict[str, bytes], set[tuple[str, int]],
                                              dict[str, bytes]]:
    """(files, own checks, services) as the load memo keeps them, from a signed file;
    ``Miss`` when it is too large, not signed with ``key``, of other code, or damaged."""
    if len(data) > MAX_BYTES:
        raise Miss(f"it is larger than {MAX_BYTES} bytes")
    end = data.find(b"\n", 0, 256)
    head = data[:end] if end > 0 else b""
    fields = head.split(b" ")
    if len(fields) != 4 or fields[0] != MAGIC:
        raise Miss("it is not a carried load memo")
    signed = b" ".join(fields[:3]) + b"\n" + data[end + 1:]
    if not hmac.compare_digest(fields[3], _signature(key, signed).encode()):
        raise BadSignature("its signature does not match the key (another key signed "
                           "it, or it was changed)")
    if fields[1] != b"%d" % FORMAT or fields[2] != code_fingerprint().encode():
        raise Miss("another version of omegitops wrote it")
    try:
        state = orjson.loads(memoryview(data)[end + 1:])
        return (_files(state["files"]), {_source(s) for s in _typed(state["own"], list)},
                _services(state["services"]))
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise Miss(f"its content is not shaped as written ({err})") from err


class BadSignature(Miss):
    pass


def _typed(value: Any, kind: type) -> Any:
    if not isinstance(value, kind):
        raise TypeError(f"{type(value).__name__} where {kind.__name__} was written")
    return value


def _files(value: Any) -> dict[str, bytes]:
    out = {}
    for key, documents in _typed(value, dict).items():
        kept = []
        for document in _typed(documents, list):
            index, line, found = _typed(document, list)
            kept.append((_typed(index, int), _typed(line, int), found))
        out[key] = marshal.dumps(kept)
    return out


def _source(value: Any) -> tuple[str, int]:
    key, place = _typed(value, list)
    return _typed(key, str), _typed(place, int)


def _services(value: Any) -> dict[str, bytes]:
    """Each finding as ``findings.pack`` wrote it; each part's types are checked when
    it is used (``findings.unpack``), as for the cache folder's memo."""
    out = {}
    for key, found in _typed(value, dict).items():
        warnings, resolved, managed = _typed(found, list)
        out[key] = marshal.dumps((
            [_tupled(w) for w in _typed(warnings, list)],
            [(_tupled(sid), component, _lifecycle(lifecycle),
              marshal.dumps(templates), revision)
             for sid, component, lifecycle, templates, revision in _typed(resolved, list)],
            managed))
    return out


def _tupled(value: Any) -> tuple:
    return tuple(tuple(p) if isinstance(p, list) else p for p in _typed(value, list))


def _resolved(value: Any) -> tuple:
    found, source, path = _typed(value, list)
    return (found, source, tuple(_typed(path, list)))


def _lifecycle(value: Any) -> tuple:
    component, mode, shape, worker_size, replicas, named, settings, bounds = \
        _typed(value, list)
    settings = dict(_typed(settings, dict))
    retry = settings.get("update_retry")
    settings["update_retry"] = None if retry is None else tuple(_typed(retry, list))
    return (component, _resolved(mode), shape, worker_size, replicas,
            {name: _resolved(r) for name, r in _typed(named, dict).items()}, settings,
            None if bounds is None else tuple(_typed(bounds, list)))


def carried_memo(data: bytes | None, key: bytes, folder: Path | None,
                 where: str) -> LoadMemo:
    """The run's load memo: the cache folder's (``folder``; None: this process's only),
    with what the carried file ``data`` (from ``where``) holds. A file not read costs
    only the work it would have saved."""
    memo = memo_for(folder) if folder is not None else LoadMemo(None)
    if data is None:
        log.info("no carried load memo in %s yet: this run writes one", where)
        return memo
    try:
        files, own, services = decode(data, key)
    except BadSignature as err:
        log.warning("carried load memo in %s not read: %s", where, err)
        return memo
    except Miss as err:
        log.info("carried load memo in %s not read: %s", where, err)
        return memo
    memo.carry_in(files, own, services)
    log.info("carried load memo read from %s: %d files, %d services", where, len(files),
             len(services))
    return memo
