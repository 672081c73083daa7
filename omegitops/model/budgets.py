"""Budget arithmetic: maxSurge, maxUnavailable and partition as numbers.

A budget is a whole number or a percentage of the component's desired
Instances, and a percentage is rounded *up* for both budgets (unlike a
Deployment, which rounds maxUnavailable down): 25% of two Instances is one.
"""

from __future__ import annotations

import math

from omegitops.util.goint import atoi


class BudgetError(ValueError):
    """Neither a whole number nor a percentage."""


def parse_int_or_percent(value: int | str) -> tuple[int, bool]:
    """``3`` -> (3, False); ``"25%"`` -> (25, True); ``"3"`` -> (3, False)."""
    if isinstance(value, bool):
        raise BudgetError(f"expected a whole number or a percentage, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise BudgetError(f"must be >= 0, got {value}")
        return value, False
    if isinstance(value, str):
        # As Kubernetes reads an IntOrString: strconv.Atoi on the text before the
        # ``%``, ASCII digits within 64 bits (a 5,000-digit one is refused, not a crash).
        text = value.strip()
        percent = text.endswith("%")
        number = atoi(text[:-1] if percent else text)
        if number is not None and text[:1] not in "+-":
            return number, percent
    raise BudgetError(f"expected a whole number or a percentage such as '25%', got {value!r}")


def is_over_100_percent(value: int | str) -> bool:
    try:
        amount, percent = parse_int_or_percent(value)
    except BudgetError:
        return False
    return percent and amount > 100


def is_zero(value: int | str | None) -> bool:
    """Whether a set budget is zero in every fleet size (``0`` or ``"0%"``)."""
    if value is None:
        return False
    try:
        return parse_int_or_percent(value)[0] == 0
    except BudgetError:
        return False


def scaled_value(value: int | str | None, desired: int) -> int | None:
    """The budget in Instances for ``desired`` Instances; None when unset.

    >>> scaled_value("25%", 2)   # 25% of two Instances is one
    1
    >>> scaled_value("25%", 16)  # a 16-Instance rollout moves four at a time
    4
    >>> scaled_value("10%", 3)   # 0.3 rounds up to one
    1
    >>> scaled_value(2, 16)
    2
    """
    if value is None:
        return None
    amount, percent = parse_int_or_percent(value)
    if not percent:
        return amount
    return math.ceil(amount * desired / 100)
