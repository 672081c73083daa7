"""status.json is the standard library's indented JSON, whoever writes it."""

import json

from omegitops.report.status import render_json


def _stdlib(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def test_the_report_is_written_as_json_dumps_indents_it():
    report = {"summary": {"services": 2, "health": {}}, "services": [
        {"name": "é-service", "components": [], "ratio": 0.25, "ok": True, "none": None,
         "note": "line\nbreak \u2028 \"quoted\" <tag>"}], "unknownReplicas": []}
    assert render_json(report) == _stdlib(report)


def test_an_integer_past_64_bits_is_still_written():
    report = {"summary": {"services": 2**70}}
    assert render_json(report) == _stdlib(report)
