"""The simulated cluster's file is the compact JSON the standard library writes."""

import json

from omegitops.cluster.sim.store import _encoded


def test_the_state_is_written_as_compact_json():
    state = {"objects": {"Pod": {"ns/p": {"metadata": {"name": "p", "labels": {"a": "é"}},
                                          "spec": {"n": [1, 2.5, True, None]}}}},
             "clock": "2026-01-01T00:00:00Z"}
    assert json.loads(_encoded(state)) == state
    assert _encoded({"a": [1, "b"], "c": {}}) == b'{"a":[1,"b"],"c":{}}'


def test_an_integer_past_64_bits_is_still_written():
    state = {"objects": {"n": 2**70}}
    assert json.loads(_encoded(state)) == state
