"""Whole numbers written as text, read as Go's ``strconv.Atoi`` reads them.

Kubernetes reads the numbers its objects hold as text (an annotation, the
number in ``"25%"``) with ``strconv.Atoi``: an optional sign and ASCII digits,
nothing around them, within 64 bits. Python's ``int`` takes more (spaces, ``_``,
any script's digits: ``int("٣")`` is 3) and, past 4,300 digits, raises rather
than answers; so a value Kubernetes refuses would be read here as a number.
"""

from __future__ import annotations

import re

_ATOI = re.compile(r"[+-]?[0-9]+", re.ASCII)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# More digits than any 64-bit number has, zeros first or not, are not converted.
_MAX_DIGITS = 100


def atoi(text: str) -> int | None:
    """The number ``text`` holds as ``strconv.Atoi`` reads it, or None where Go
    gives an error (a syntax error, or out of the 64-bit range)."""
    if not isinstance(text, str) or not _ATOI.fullmatch(text):
        return None
    if len(text.lstrip("+-").lstrip("0")) > _MAX_DIGITS:
        return None
    value = int(text)
    return value if INT64_MIN <= value <= INT64_MAX else None
