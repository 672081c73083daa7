"""The nightly campaign script: its document, and how it names what broke."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.campaigns import invariant_of

ROOT = Path(__file__).resolve().parents[2]


def test_failures_are_named_by_the_invariant_they_broke():
    assert invariant_of(AssertionError("gang ('demo', 'a', 'engine', 2) is partly in rotation")) \
        == "gang-in-rotation-whole"
    assert invariant_of(AssertionError("still busy after 600 passes:\n...")) == "converges"
    assert invariant_of(KeyError("x")) == "crash: KeyError"
    try:
        assert not ROOT, "something new"
    except AssertionError as error:
        assert invariant_of(error).startswith("assert in test_failures_are_named")


def test_the_script_prints_one_json_document_of_campaigns_and_failures():
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "campaigns.py"), "--from", "7",
                          "--seeds", "1", "--examples", "1", "--kill-examples", "1",
                          "--jobs", "1"], capture_output=True, text=True, timeout=300,
                         check=False)
    document = json.loads(run.stdout)
    assert document["seeds"] == {"from": 7, "count": 1}
    assert document["campaigns"] == 2
    assert run.returncode == (1 if document["failed"] else 0), run.stderr
    assert sum(document["failures_by_invariant"].values()) == document["failed"]
    assert "seed 7: 2 campaigns" in run.stderr
