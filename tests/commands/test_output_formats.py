"""``-o``: every command with structured output takes ``json`` and ``yaml``, and the two
print the same document; each keeps its own human formats (docs/commands.md lists
them per command)."""

from __future__ import annotations

import argparse
import json

import yaml

from omegitops.cli import build_parser
from tests.conftest import EXAMPLES

# Each command's -o, as docs/commands.md lists them: the human formats, then json|yaml.
OUTPUTS = {
    ("validate",): ["text", "json", "yaml"],
    ("resolve",): ["table", "json", "yaml"],
    ("plan",): ["markdown", "json", "yaml"],
    ("get",): ["table", "wide", "json", "yaml", "name"],
    ("instance", "list"): ["table", "json", "yaml"],
    ("instance", "status"): ["table", "json", "yaml"],
    ("rollout", "status"): ["json", "yaml"],
    ("events",): ["table", "json", "yaml"],
    ("sim", "show"): ["table", "json", "yaml"],
}


def leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    children = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not children:
        yield path, parser
    for action in children:
        for name, child in action.choices.items():
            yield from leaf_parsers(child, (*path, name))


def output_choices(parser: argparse.ArgumentParser) -> list[str] | None:
    for action in parser._actions:
        if "--output" in action.option_strings:
            return list(action.choices)
    return None


def test_every_output_flag_takes_json_and_yaml_and_is_documented():
    found = {path: choices for path, parser in leaf_parsers(build_parser())
             if (choices := output_choices(parser)) is not None}
    assert found == OUTPUTS
    for path, choices in found.items():
        assert {"json", "yaml"} <= set(choices), path
    from pathlib import Path

    synopsis = (Path(__file__).resolve().parents[2] / "docs" / "commands.md").read_text()
    for path, choices in OUTPUTS.items():
        assert f"-o {'|'.join(choices)}" in synopsis, (path, choices)


def same_document(cli, *argv: str) -> object:
    code, as_json, err = cli(*argv, "-o", "json")
    assert code == 0, err
    code, as_yaml, err = cli(*argv, "-o", "yaml")
    assert code == 0, err
    assert yaml.safe_load(as_yaml) == json.loads(as_json)
    return json.loads(as_json)


def test_validate_yaml(cli):
    document = same_document(cli, "validate", "--repo", str(EXAMPLES), "--cache-dir", "")
    assert document["errors"] == [] and document["valid"]


def test_plan_yaml(cli):
    document = same_document(cli, "plan", "--repo", str(EXAMPLES), "--cache-dir", "",
                             "--no-forecast")
    assert document["summary"]["changing"] > 0


def test_events_and_sim_show_yaml(cli, settled):
    assert same_document(cli, "events", "--cluster", settled)
    shown = same_document(cli, "sim", "show", "--cluster", settled)
    assert shown["pods"] and shown["now"]


def test_the_old_values_still_work(cli):
    code, out, _ = cli("validate", "--repo", str(EXAMPLES), "--cache-dir", "", "-o", "text")
    assert code == 0 and "valid objects" in out
