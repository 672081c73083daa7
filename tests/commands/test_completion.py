"""``omegitops completion SHELL``: the script names every command, nested command and
flag the parser has, and bash completes from it as a user's shell would."""

from __future__ import annotations

import argparse
import shutil
import subprocess

import pytest

from omegitops.cli import build_parser, main


def script(capsys, shell: str) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def commands(parser: argparse.ArgumentParser) -> set[str]:
    """The top-level verbs of the parser."""
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(action.choices)


def test_the_bash_script_names_every_command(capsys):
    text = script(capsys, "bash")
    verbs = commands(build_parser())
    assert {"validate", "plan", "reconcile", "get", "instance", "rollout", "completion"} <= verbs
    (line,) = [x for x in text.splitlines() if x.startswith("_shtab_omegitops_subparsers=")]
    assert set(line.split("=(", 1)[1].rstrip(")").split()) == verbs
    assert "_shtab_omegitops_rollout_subparsers=(pause resume promote status)" in text
    assert "complete -o bashdefault -F _shtab_omegitops omegitops" in text


def complete(text: str, *words: str) -> list[str]:
    """What bash offers after ``omegitops WORDS...`` (the last word being typed)."""
    line = " ".join(["omegitops", *words])
    program = (f"{text}\nCOMP_WORDS=(omegitops {' '.join(repr(w) for w in words)}); "
               f"COMP_CWORD={len(words)}; COMP_LINE={line!r}; COMP_POINT={len(line)}; "
               "_shtab_omegitops; printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run(["bash", "--norc", "-c", program], capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_commands_nested_commands_and_choices(capsys):
    text = script(capsys, "bash")
    assert set(complete(text, "")) == commands(build_parser())
    assert complete(text, "rollout", "p") == ["pause", "promote"]
    assert set(complete(text, "validate", "-o", "")) == {"text", "json", "yaml"}


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_the_other_shells_name_the_commands(capsys, shell):
    text = script(capsys, shell)
    for verb in ("validate", "reconcile", "merge-reports", "instance", "completion"):
        assert verb in text, (shell, verb)


def test_an_unknown_shell_is_a_usage_error(capsys):
    assert main(["completion", "cmd.exe"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_the_help_shows_how_to_install_it(capsys):
    assert main(["completion", "--help"]) == 0
    out = capsys.readouterr().out
    assert "source <(omegitops completion bash)" in out
