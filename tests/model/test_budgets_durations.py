import pytest

from omegitops.model.budgets import (
    BudgetError,
    is_over_100_percent,
    is_zero,
    parse_int_or_percent,
    scaled_value,
)
from omegitops.model.durations import DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    "value, desired, expected",
    [
        ("25%", 2, 1),  # update-strategies.txt: "25% of two Instances is one"
        ("25%", 16, 4),
        ("25%", 5, 2),  # 1.25 rounds up
        ("10%", 3, 1),
        ("100%", 7, 7),
        ("0%", 8, 0),
        (3, 16, 3),
        ("3", 16, 3),
        (None, 4, None),
    ],
)
def test_percentages_round_up(value, desired, expected):
    assert scaled_value(value, desired) == expected


def test_budget_parsing():
    assert parse_int_or_percent("25%") == (25, True)
    assert parse_int_or_percent(0) == (0, False)
    for bad in ("abc", "25 %", -1, True, 1.5):
        with pytest.raises(BudgetError):
            parse_int_or_percent(bad)
    assert is_over_100_percent("150%") and not is_over_100_percent("100%")
    assert not is_over_100_percent(150)  # a whole number is a count, not a share
    assert is_zero(0) and is_zero("0%") and not is_zero(None) and not is_zero("1%")


@pytest.mark.parametrize(
    "text, seconds",
    [("90s", 90), ("15m", 900), ("1h30m", 5400), ("0", 0), ("1.5h", 5400), ("500ms", 0.5)],
)
def test_go_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "90", "1d", "m", "1h 30m", "abc"])
def test_bad_durations(text):
    with pytest.raises(DurationError):
        parse_duration(text)


def test_format_duration():
    assert format_duration(5400) == "1h30m"
    assert format_duration(0) == "0s"
    assert format_duration(61) == "1m1s"
