"""omegitops' quantity parser gives the official client's answers.

``omegitops/util/quantities.py`` parses quantities itself because the
planner, ``validate``, ``plan`` and ``sim:`` run without the ``kubernetes``
extra; ``kubernetes.utils.parse_quantity`` is the reference it is held to."""

from __future__ import annotations

from math import ceil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omegitops.util.quantities import parse_milli

kubernetes_utils = pytest.importorskip("kubernetes.utils")

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E",
            "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


def reference(text: str) -> int | None:
    try:
        return ceil(kubernetes_utils.parse_quantity(text) * 1000)
    except ValueError:
        return None


def ours(text: str) -> int | None:
    try:
        return parse_milli(text)
    except ValueError:
        return None


@pytest.mark.parametrize("text", [
    "1", "0.5", "100m", "250m", "2048Gi", "1.5Gi", "1k", "1M", "12e-3", "1e3", "1E3",
    "2E", "500u", "3n", "1Ki", "0", "+1", "1.0001m", "7Ti", "1Ei", "abc", "1Gb", "1.2.3",
    "Gi", "e3"])
def test_known_quantities(text):
    assert ours(text) == reference(text)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(whole=st.integers(min_value=0, max_value=10**6),
       fraction=st.one_of(st.none(), st.integers(min_value=0, max_value=999)),
       suffix=st.sampled_from(SUFFIXES))
def test_generated_quantities(whole, fraction, suffix):
    text = f"{whole}{'' if fraction is None else f'.{fraction:03d}'}{suffix}"
    assert ours(text) == reference(text), text
