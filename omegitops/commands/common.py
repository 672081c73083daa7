"""Arguments and output helpers shared by the command modules."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from omegitops.manifests.memo import default_cache_dir


def add_repo_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", default=".", help="repository folder (default: .); reconcile also takes a git URL")
    parser.add_argument(
        "--operator-values",
        default=None,
        metavar="FILE",
        help="operator Helm values file (default: ome-values.yaml in the repository)",
    )
    parser.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="where to keep the load memo between runs (default: $OMEGITOPS_CACHE_DIR, "
             "else ~/.cache/omegitops; an empty value: no memo)",
    )


def cache_dir(args: argparse.Namespace) -> Path | None:
    """``load``'s ``cache_dir`` from ``--cache-dir``: the default folder when not given
    (``OMEGITOPS_CACHE_DIR``, else the user's cache folder), None (no memo) when empty."""
    chosen = getattr(args, "cache_dir", None)
    if chosen is None:
        return default_cache_dir()
    return Path(chosen) if chosen else None


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def print_yaml(data: Any) -> None:
    yaml.safe_dump(data, sys.stdout, sort_keys=False, default_flow_style=False)


# What every command's -o takes for its structured output (docs/commands.md), next to
# its own human formats (table, text, markdown, wide, name).
STRUCTURED = ("json", "yaml")


def print_structured(data: Any, output: str) -> None:
    """``-o json`` or ``-o yaml``: the same document either way. YAML is written from
    the JSON's values, so that a value JSON writes as text (a time) reads the same."""
    if output == "yaml":
        print_yaml(json.loads(json.dumps(data, default=str)))
    else:
        print_json(data)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A kubectl-style table: upper-case headers, columns padded by three spaces."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["   ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


# Ten years: a longer time budget, or a forecast window, is a typo (and past year 9999
# the clock's arithmetic overflows).
MAX_SECONDS = 10 * 365 * 86400


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds, >= 0 and at most ten years."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0 or value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds from 0 to {MAX_SECONDS} (ten years)")
    return value


def report_folder(text: str) -> str:
    """An argparse type: a report folder, which an empty value is not (it wrote
    nothing at all, without a word)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty folder name: give the folder the "
                                         "report goes into (or leave the option out)")
    return text


def branch_name(text: str) -> str:
    """An argparse type: a branch name, which an empty value is not (the option was
    then ignored without a word, and the report read or written elsewhere)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty branch name: give the branch (e.g. "
                                         "omegitops-status) or leave the option out")
    return text


def output_file(text: str) -> str:
    """An argparse type: a file that can be written: its folder exists, and it is not a
    folder itself (found only once the work is done, either cost a traceback)."""
    from pathlib import Path

    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: the folder {path.parent} does not exist")
    return text
