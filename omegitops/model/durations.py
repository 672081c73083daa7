"""Go duration strings (``90s``, ``15m``, ``1h30m``), as the chart writes them."""

from __future__ import annotations

import re

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
# Go's time.Duration is an int64 of nanoseconds: OME's manager cannot hold a longer
# duration (ParseDuration refuses it), and no clock reaches past it.
MAX_SECONDS = (2**63 - 1) / 1e9
LONGEST = "2562047h47m16s"
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class DurationError(ValueError):
    """Not a Go duration."""


def parse_duration(text: str) -> float:
    """Seconds in a Go duration: ``parse_duration("1h30m") == 5400``.

    As in Go, a bare ``0`` is allowed and every other number needs a unit.
    """
    if not isinstance(text, str):
        raise DurationError(f"expected a duration string such as '90s', got {text!r}")
    body = text.strip()
    sign = 1.0
    if body[:1] in "+-" and body:
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if body == "0":
        return 0.0
    total, pos = 0.0, 0
    for match in _PART.finditer(body):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(body) or not body:
        raise DurationError(f"invalid duration {text!r}: expected a Go duration such as '90s'")
    if total > MAX_SECONDS:
        raise DurationError(f"duration {_clip(text)} is longer than a Go duration can be "
                            f"(at most {LONGEST})")
    return sign * total


def _clip(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def format_duration(seconds: float | None) -> str:
    """The shortest Go spelling of whole seconds: 5400 -> ``1h30m``, 0 -> ``0s``."""
    if seconds is None:
        return ""
    whole = round(seconds)
    sign = "-" if whole < 0 else ""
    whole = abs(whole)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{hours}h"
    if minutes:
        out += f"{minutes}m"
    if secs or not out:
        out += f"{secs}s"
    return sign + out
