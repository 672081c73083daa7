"""Every command's ``--help`` ends with examples, and every example parses with the real
parser; the time budgets state their defaults."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from omegitops.cli import build_parser, main
from omegitops.commands.examples import EXAMPLES


def every_parser(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from every_parser(child, (*path, name))


COMMANDS = [path for path, _ in every_parser(build_parser()) if path]


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_the_help_ends_with_examples_of_the_command(capsys, path):
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert "\nexamples:\n" in out, path
    examples = out.split("\nexamples:\n", 1)[1]
    assert f"omegitops {' '.join(path)}" in examples or (
        len(path) == 1 and f"omegitops {path[0]} " in examples), examples


@pytest.mark.parametrize("path", sorted(EXAMPLES), ids=" ".join)
def test_every_example_parses(path):
    for line in EXAMPLES[path]:
        words = shlex.split(line, comments=True)
        assert words[0] == "omegitops"
        try:
            args = build_parser().parse_args(words[1:])
        except SystemExit:  # pragma: no cover - the message is on stderr
            pytest.fail(f"does not parse: {line}")
        assert args.func is not None


def test_every_example_is_for_a_command_there_is():
    assert set(EXAMPLES) <= set(COMMANDS)


def help_of(capsys, *words: str) -> str:
    assert main([*words, "--help"]) == 0
    return re.sub(r"\s+", " ", capsys.readouterr().out)


def test_the_time_budgets_state_their_defaults(capsys):
    assert "--max-seconds MAX_SECONDS time budget of --until-idle in seconds" in help_of(
        capsys, "reconcile")
    assert "default: 3600" in help_of(capsys, "reconcile")
    plan = help_of(capsys, "plan")
    assert "--forecast-seconds S simulated time budget of the forecast (default: 7200)" in plan
    options = plan.split(" options: ", 1)[1]
    job_seconds = options.split("--job-seconds S", 1)[1].split("--no-forecast", 1)[0]
    assert "default" in job_seconds, job_seconds
