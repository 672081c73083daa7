"""``omegitops completion SHELL``: a completion script for the shell, made by shtab from
the command line's own parser, so that it names every command and flag there is.

The command is given the whole parser when it is registered (``register(subparsers,
root)``): the script describes the line above this command, not the command alone.
"""

from __future__ import annotations

import argparse
import functools

SHELLS = ("bash", "zsh", "fish", "tcsh", "powershell")

EXAMPLES = """\
examples:
  # bash: for this shell, then for every new one
  source <(omegitops completion bash)
  omegitops completion bash > ~/.local/share/bash-completion/completions/omegitops

  # zsh: a file named _omegitops in a folder of $fpath
  omegitops completion zsh > "${fpath[1]}/_omegitops"

  # fish
  omegitops completion fish > ~/.config/fish/completions/omegitops.fish
"""


def register(subparsers: argparse._SubParsersAction, root: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "completion", help="print a shell completion script (bash, zsh, fish, ...)",
        description="Print the completion script of omegitops for SHELL on stdout.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shell", choices=SHELLS, metavar="SHELL",
                        help="one of: " + ", ".join(SHELLS))
    parser.set_defaults(func=functools.partial(run, root))


def script(root: argparse.ArgumentParser, shell: str) -> str:
    import shtab  # here: every other command would pay for its import (a tenth of startup)

    return shtab.complete(root, shell=shell)


def run(root: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    print(script(root, args.shell))
    return 0
