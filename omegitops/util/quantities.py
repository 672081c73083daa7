"""Kubernetes resource quantities (``500m``, ``2``, ``2048Gi``, ``1e3``) as integer milli-units.

Milli-units keep CPU exact (``250m`` is 250) and every other resource an integer,
so that sums and comparisons never round.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from math import ceil

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}


def parse_milli(value: str | float) -> int:
    """The quantity in thousandths, rounded up as Kubernetes rounds requests: ``"1.5"`` -> 1500."""
    if isinstance(value, bool):
        raise TypeError(f"not a quantity: {value!r}")
    if isinstance(value, (int, float)):
        return ceil(Decimal(str(value)) * 1000)
    text = value.strip()
    number, multiplier = _split_suffix(text)
    try:
        amount = Decimal(number) * multiplier
    except InvalidOperation:
        raise ValueError(f"not a quantity: {value!r}") from None
    return ceil(amount * 1000)


def _split_suffix(text: str) -> tuple[str, Decimal]:
    if text[-2:] in _BINARY:
        return text[:-2], Decimal(_BINARY[text[-2:]])
    if text and text[-1] in _DECIMAL and not text[-1].isdigit():
        # "1e3" is an exponent, not the suffix "E"; only capital E is exa.
        return text[:-1], _DECIMAL[text[-1]]
    return text, Decimal(1)


def format_milli(milli: int, resource: str = "") -> str:
    """A readable quantity: cpu in cores or millicores, memory in Gi when whole, else a number."""
    if milli % 1000:
        return f"{milli}m"
    whole = milli // 1000
    if resource == "memory" and whole and whole % 2**30 == 0:
        return f"{whole // 2**30}Gi"
    return str(whole)
