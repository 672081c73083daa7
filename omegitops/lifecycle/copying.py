"""Deep copies of JSON-shaped data, fast."""

from __future__ import annotations

import copy
import marshal
from typing import Any


def json_copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, strings, numbers, booleans, None).

    marshal's C round trip is several times faster than copy.deepcopy, which
    was the largest cost of planning a 1,000-service fleet (decoding Instance
    rows, merging pod templates). Anything marshal cannot take (a date YAML
    read from a manifest, say) falls back to copy.deepcopy, so the result is
    always a copy equal to ``value``.
    """
    try:
        return marshal.loads(marshal.dumps(value))
    except ValueError:
        return copy.deepcopy(value)
