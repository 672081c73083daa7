"""The three PATCH flavours the API server takes, on plain JSON (for the API double).

- JSON patch (RFC 6902): add, remove, replace, test, move, copy;
- JSON merge patch (RFC 7386): objects merge, null deletes, lists replace;
- strategic merge patch: as merge, but lists with a merge key merge by it
  (``containers`` by ``name``, ``conditions`` by ``type``...), and an item
  ``{"$patch": "delete", key: ...}`` removes one. Other ``$`` directives
  (``$setElementOrder``, ``$retainKeys``) are accepted and ignored.
"""

from __future__ import annotations

import copy
from typing import Any

# Lists merged by a key under strategic merge (the ones omegitops' kinds use).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "conditions": "type",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "readinessGates": "conditionType",
    "schedulingGates": "name",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "containerStatuses": "name",
}


class PatchError(ValueError):
    """A patch that does not apply (a failed test, a missing path): HTTP 422."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Kubernetes' strategic merge for the list keys in MERGE_KEYS."""
    if isinstance(patch, list):
        key = MERGE_KEYS.get(field)
        if key is None or not isinstance(target, list):
            return [item for item in copy.deepcopy(patch)
                    if not (isinstance(item, dict) and item.get("$patch") == "delete")]
        return _merge_list(target, patch, key)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if name.startswith("$"):
            continue
        if value is None:
            result.pop(name, None)
        else:
            result[name] = strategic_merge_patch(result.get(name), value, name)
    return result


def _merge_list(target: list, patch: list, key: str) -> list:
    result = [copy.deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"strategic merge patch: list item without merge key {key!r}")
        index = next((i for i, old in enumerate(result)
                      if isinstance(old, dict) and old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(strategic_merge_patch({}, item))
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def json_patch(target: Any, operations: list) -> Any:
    """RFC 6902."""
    doc = copy.deepcopy(target)
    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"test failed at {path}")
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "replace":
            _get(doc, path)  # must exist
            doc = _add(_remove(doc, path), path, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_get(doc, op.get("from", "")))
            if kind == "move":
                doc = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        else:
            raise PatchError(f"unknown JSON patch op {kind!r}")
    return doc


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"bad JSON pointer {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _get(doc: Any, path: str) -> Any:
    for token in _tokens(path):
        try:
            doc = doc[int(token)] if isinstance(doc, list) else doc[token]
        except (KeyError, IndexError, ValueError, TypeError) as err:
            raise PatchError(f"no value at {path}") from err
    return doc


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    tokens = _tokens(path)
    if not tokens:
        raise PatchError("cannot address the whole document here")
    return _get(doc, "".join("/" + t.replace("~", "~0").replace("/", "~1")
                             for t in tokens[:-1])), tokens[-1]


def _add(doc: Any, path: str, value: Any) -> Any:
    if path == "":
        return value
    parent, last = _parent(doc, path)
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if not 0 <= index <= len(parent):
            raise PatchError(f"index out of range at {path}")
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise PatchError(f"no container at {path}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, path)
    try:
        if isinstance(parent, list):
            del parent[int(last)]
        else:
            del parent[last]
    except (KeyError, IndexError, ValueError, TypeError) as err:
        raise PatchError(f"no value at {path}") from err
    return doc
