"""Fixtures the command tests share."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES


@pytest.fixture
def settled(cli, tmp_path):
    """A sim cluster on which examples/ has been reconciled until idle; returns --cluster."""
    spec = f"sim:{tmp_path / 'cluster.json'}"
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", spec, "--until-idle")
    assert code == 0, err
    return spec
