"""Making a loaded manifest what the API server would store: JSON values only.

YAML has types JSON has not. PyYAML builds a ``date`` from an unquoted
``2024-01-01``, ``bytes`` from ``!!binary``, a ``set`` from ``!!set`` and
``inf`` from ``.inf``; none of them can be sent to the API, and each would fail
the component in the template hash on every pass. And YAML's ``1.0`` is a
float, which JSON Schema (and the API server's own validation) counts as the
integer 1, while Python code asking for an ``int`` does not: it is made the
integer here, as the API server stores it, so that what validation accepted is
what the planner reads.
"""

from __future__ import annotations

import math
from typing import Any

Path = tuple[str | int, ...]

# What PyYAML makes of the values JSON has no type for, as a message names them.
_NAMES = {"date": "a date", "datetime": "a date and time", "bytes": "bytes (!!binary)",
          "set": "a set (!!set)", "tuple": "a pair (!!pairs or !!omap)",
          "float": "a number JSON cannot write"}


def normalize_json(data: Any) -> list[tuple[Path, str]]:
    """Make whole floats integers in ``data`` (in place); the values JSON cannot hold,
    as (field path, what it is)."""
    found: list[tuple[Path, str]] = []
    stack: list[tuple[Any, Path]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, float) and math.isfinite(item) and item.is_integer():
                    value[key] = int(item)
                else:
                    stack.append((item, (*path, key)))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, float) and math.isfinite(item) and item.is_integer():
                    value[index] = int(item)
                else:
                    stack.append((item, (*path, index)))
        elif not _is_json_scalar(value):
            found.append((path, _NAMES.get(type(value).__name__, f"a {type(value).__name__}")))
    return found


def _is_json_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, int, bool))
