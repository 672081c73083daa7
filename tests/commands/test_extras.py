"""The lighter install: plan, validate and sim: need neither the Kubernetes client
nor GitPython; what needs one says which extra to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import EXAMPLES


def test_validate_plan_and_a_sim_reconcile_need_neither_extra(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        sys.modules["kubernetes"] = sys.modules["git"] = None  # as if not installed
        from omegitops.cli import main
        assert main(["validate", "--repo", {str(EXAMPLES)!r}]) == 0
        assert main(["plan", "--repo", {str(EXAMPLES)!r}, "--no-forecast"]) in (0, 2)
        assert main(["reconcile", "--repo", {str(EXAMPLES)!r},
                     "--cluster", "sim:{tmp_path / 'c.json'}"]) == 0
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize("module, argv, extra", [
    ("kubernetes", ["get", "irep", "--cluster", "kube"], "kube"),
    ("git", ["reconcile", "--repo", "https://example.invalid/fleet.git",
             "--cluster", "sim:{tmp}/c.json"], "git"),
])
def test_a_missing_extra_is_named(cli, tmp_path, monkeypatch, module, argv, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    code, _, err = cli(*[a.format(tmp=tmp_path) for a in argv])
    assert code == 1, err
    assert f"pip install 'omegitops[{extra}]'" in err
