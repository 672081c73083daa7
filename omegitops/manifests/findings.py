"""What a service's checks found, and that finding as the load memo keeps it: plain data.

The memo (``memo.py``) stores no objects, only values marshal writes as data (tuples,
dicts, strings, numbers, booleans, None, bytes). A finding is packed into such values
when it is remembered and built again when it is read, each part checked for its shape
and type: a memo whose content is not what this code wrote is a miss, never a crash.
"""

from __future__ import annotations

import marshal
import typing
from dataclasses import fields
from typing import Any, NamedTuple

from omegitops.manifests.repository import ManifestError
from omegitops.model.ids import ResourceId
from omegitops.model.settings import ComponentSettings, UpdateRetry
from omegitops.render.resolve import ComponentLifecycle, Resolved
from omegitops.util.copying import Packed


class Resolution(NamedTuple):
    """What validation resolved and rendered for one OMENative component."""

    lifecycle: ComponentLifecycle
    templates: Packed
    # The templates' revision hash (``templates.revision_hash``), computed once with them.
    revision_hash: str


# (the warnings the checks gave, what they resolved by (service id, component), whether
# the service is managed)
Finding = tuple[list[ManifestError], dict[tuple[ResourceId, str], Resolution], bool]


class NotAFinding(ValueError):
    """Memo content that is not a finding this code wrote."""


def pack(found: Finding) -> bytes | None:
    """The finding as marshal bytes of plain data; None when a part is not plain (a
    value marshal cannot take): such a finding is not remembered."""
    warnings, resolved, managed = found
    try:
        return marshal.dumps((
            [_pack_error(w) for w in warnings],
            [(_pack_id(sid), component, _pack_lifecycle(r.lifecycle), _raw(r.templates),
              r.revision_hash) for (sid, component), r in resolved.items()],
            managed,
        ))
    except (ValueError, _NotPlain):
        return None


def unpack(raw: bytes) -> Finding:
    """The finding ``pack`` made these bytes of; ``NotAFinding`` for anything else."""
    try:
        warnings, resolved, managed = marshal.loads(raw)
        found = ([_unpack_error(w) for w in _list(warnings)],
                 dict(_unpack_resolution(r) for r in _list(resolved)),
                 _typed(managed, bool))
    except NotAFinding:
        raise
    except Exception as err:  # any damage is the same answer: not what was written
        raise NotAFinding(str(err)) from err
    return found


class _NotPlain(Exception):
    pass


# -- packing ------------------------------------------------------------------------

def _raw(packed: Packed) -> bytes:
    if packed.raw is None:
        raise _NotPlain("templates marshal could not take")
    return packed.raw


def _pack_id(rid: ResourceId | None) -> tuple[str, str, str] | None:
    return None if rid is None else (rid.kind, rid.namespace, rid.name)


def _pack_error(error: ManifestError) -> tuple:
    return (error.path, error.line, error.message, _pack_id(error.obj), error.field)


def _pack_resolved(value: Resolved) -> tuple:
    return (value.value, value.source, value.path)


def _pack_lifecycle(lifecycle: ComponentLifecycle) -> tuple:
    settings = lifecycle.settings
    retry = settings.update_retry
    values = {f.name: getattr(settings, f.name) for f in fields(settings)}
    values["update_retry"] = None if retry is None else (retry.max_attempts,
                                                        retry.initial_backoff)
    return (lifecycle.component, _pack_resolved(lifecycle.mode), lifecycle.shape,
            lifecycle.worker_size, lifecycle.replicas,
            {name: _pack_resolved(r) for name, r in lifecycle.fields.items()}, values,
            lifecycle.bounds)


# -- unpacking, each part checked -----------------------------------------------------

def _typed(value: Any, *kinds: type) -> Any:
    if not isinstance(value, kinds):
        raise NotAFinding(f"{type(value).__name__} where {kinds} was written")
    return value


def _list(value: Any) -> list:
    return _typed(value, list)  # type: ignore[no-any-return]


def _optional(value: Any, kind: type) -> Any:
    return None if value is None else _typed(value, kind)


def _unpack_id(value: Any) -> ResourceId:
    kind, namespace, name = _typed(value, tuple)
    return ResourceId(_typed(kind, str), _typed(namespace, str), _typed(name, str))


def _unpack_error(value: Any) -> ManifestError:
    path, line, message, obj, field = _typed(value, tuple)
    return ManifestError(_typed(path, str), _optional(line, int), _typed(message, str),
                         None if obj is None else _unpack_id(obj), _optional(field, str))


# Resolved values built from the memo, by their packed form and the type of their value:
# a fleet's thousands of components resolve to a few dozen distinct ones, and a frozen
# dataclass takes a microsecond or two to build (33,000 of them at 1,000 services). Only
# plain values are kept (text, numbers, booleans, None), which cannot change, so one
# Resolved can serve every component; a value's type is in the key, since 1, 1.0 and
# True are equal keys but not the same setting.
_RESOLVED: dict[tuple, Resolved] = {}
# How many distinct values each of the two keeps (a bound, never reached by a fleet).
_KEPT = 4096
_PLAIN = frozenset((str, int, float, bool, type(None)))


def _unpack_resolved(value: Any) -> Resolved:
    key = None
    if value.__class__ is tuple and len(value) == 3 and value[0].__class__ in _PLAIN:
        key = (value[0].__class__, value)
        try:
            known = _RESOLVED.get(key)
        except TypeError:  # a path part that does not hash: checked below, not kept
            known = key = None
        if known is not None:
            return known
    found, source, path = _typed(value, tuple)
    for part in _typed(path, tuple):
        _typed(part, str, int)
    resolved = Resolved(found, _typed(source, str), path)
    if key is not None and len(_RESOLVED) < _KEPT:
        _RESOLVED[key] = resolved
    return resolved


def _setting_kinds() -> dict[str, tuple[type, ...]]:
    """Each setting's allowed types, from ComponentSettings' annotations (an int where
    a float is annotated is a float's value)."""
    kinds = {}
    for name, hint in typing.get_type_hints(ComponentSettings).items():
        allowed = typing.get_args(hint) or (hint,)
        allowed = tuple(type(None) if a is None else a for a in allowed)
        if float in allowed:
            allowed += (int,)
        kinds[name] = allowed
    return kinds


_SETTING_KINDS = _setting_kinds()


# ComponentSettings built from the memo, by their packed values and each value's type,
# as ``_RESOLVED`` (frozen, and every value plain or a tuple of plain values).
_SETTINGS: dict[tuple, ComponentSettings] = {}


def _unpack_settings(value: Any) -> ComponentSettings:
    key = None
    if value.__class__ is dict:
        key = tuple((name, kept.__class__, _typed_key(kept)) for name, kept in value.items())
        try:
            known = _SETTINGS.get(key)
        except TypeError:  # a value that does not hash: checked below, not kept
            known = key = None
        if known is not None:
            return known
    settings = _checked_settings(value)
    if key is not None and len(_SETTINGS) < _KEPT:
        _SETTINGS[key] = settings
    return settings


def _typed_key(value: Any) -> Any:
    """``value``, a tuple's items each with its type (``update_retry``'s backoff of 1 and
    of 1.0 are equal, but not the same setting)."""
    if value.__class__ is tuple:
        return tuple((item.__class__, item) for item in value)
    return value


def _checked_settings(value: Any) -> ComponentSettings:
    values = dict(_typed(value, dict))
    if values.keys() != _SETTING_KINDS.keys():
        raise NotAFinding("settings other than this code's")
    retry = values["update_retry"]
    if retry is not None:
        attempts, backoff = _typed(retry, tuple)
        values["update_retry"] = UpdateRetry(_typed(attempts, int), _typed(backoff, int, float))
    for name, kinds in _SETTING_KINDS.items():
        _typed(values[name], *kinds)
    return ComponentSettings(**values)


def _unpack_lifecycle(value: Any) -> ComponentLifecycle:
    component, mode, shape, worker_size, replicas, named, settings, bounds = \
        _typed(value, tuple)
    if bounds is not None:
        low, high = _typed(bounds, tuple)
        bounds = (_typed(low, int), _typed(high, int))
    return ComponentLifecycle(
        _typed(component, str), _unpack_resolved(mode), _typed(shape, str),
        _typed(worker_size, int), _typed(replicas, int),
        {_typed(name, str): _unpack_resolved(r) for name, r in _typed(named, dict).items()},
        _unpack_settings(settings), bounds)


def _unpack_resolution(value: Any) -> tuple[tuple[ResourceId, str], Resolution]:
    sid, component, lifecycle, templates, revision_hash = _typed(value, tuple)
    return ((_unpack_id(sid), _typed(component, str)),
            Resolution(_unpack_lifecycle(lifecycle), Packed.of_bytes(_typed(templates, bytes)),
                       _typed(revision_hash, str)))
