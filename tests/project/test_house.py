"""The code's own checks, run by the test command so that CI runs them: the layers
(import-linter's contracts in ``pyproject.toml``) and ``ruff check``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: the test extra installs it")
    return found


def test_the_layers_hold():
    """commands, the shell, manifests, backends, the pure core, utilities: each imports
    only from below, the lifecycle core no client of the world, kubernetes only in
    cluster.kube."""
    done = subprocess.run([_tool("lint-imports")], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_ruff_finds_nothing():
    done = subprocess.run([_tool("ruff"), "check", "omegitops", "tests"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-4000:]


def test_the_pure_core_types_strictly():
    """``mypy --strict`` over model/, render/, lifecycle/, app/ and preview/ ([tool.mypy]
    in pyproject.toml): rows, operations, holds and settings are typed values, and
    nothing there is a bare dict."""
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_whole_package_types():
    """Plain ``mypy`` (not strict) over all of omegitops, with no configuration: what
    the other packages annotate holds too."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "",
                           "--python-version", "3.11", "--ignore-missing-imports",
                           "omegitops"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_no_module_imports_itself_round_about():
    """No import cycle anywhere in omegitops, imports inside functions included (grimp
    reads them all; those only a type checker reads are left out): a cycle is how the
    step machine was once spread over five modules that imported each other from
    inside functions."""
    import grimp

    graph = grimp.build_graph("omegitops", exclude_type_checking_imports=True)
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported == module or not imported.startswith("omegitops"):
                continue
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycles.append(" -> ".join((module, *back)))
    assert not cycles, "\n".join(cycles[:20])
