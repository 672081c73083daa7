"""Shared fixtures: small repositories written on the fly, and the CLI run in-process."""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

import pytest

from omegitops.cli import main

# The load memo (omegitops/manifests/memo.py) of this test session, shared by its
# in-process and subprocess runs alike, never the developer's own cache folder.
os.environ.setdefault("OMEGITOPS_CACHE_DIR", tempfile.mkdtemp(prefix="omegitops-cache-"))

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / "examples"
SHARED_OME = REPO_ROOT.parent / "shared" / "ome"
CONTROL_PLANE_TESTS = Path(__file__).resolve().parent / "controlplane"
# The fixtures that start a real control plane (``tests/controlplane/conftest.py``).
CONTROL_PLANE_FIXTURES = {"control_plane", "node_cluster"}


def needs_control_plane(item: pytest.Item) -> bool:
    """Whether a test runs on a real control plane: every test of ``tests/controlplane/``,
    any other that uses one of its fixtures (the Lease's, say), and the ``controlplane``
    parameter of ``backend``."""
    if Path(item.path).resolve().is_relative_to(CONTROL_PLANE_TESTS):
        return True
    if CONTROL_PLANE_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("backend") == "controlplane"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark ``controlplane`` every test that needs the real control plane, before ``-m``
    selects: ``-m 'not controlplane'`` runs the simulated-cluster suite alone."""
    for item in items:
        if needs_control_plane(item):
            item.add_marker(pytest.mark.controlplane)


def write_repo(root: Path, files: dict[str, str]) -> Path:
    """Write ``{relative path: YAML text}`` under ``root`` (text is dedented)."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


@pytest.fixture
def cli(capsys):
    """Run ``omegitops ARGS`` in-process; returns (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    """The real control plane of ``tests/controlplane/`` (see its conftest.py), started
    once per session for those tests and for the ``controlplane`` parameter of
    ``backend``. ``OMEGITOPS_CONTROLPLANE=skip`` skips every test that uses it."""
    if os.environ.get("OMEGITOPS_CONTROLPLANE") == "skip":
        pytest.skip("OMEGITOPS_CONTROLPLANE=skip")
    from tests.controlplane.conftest import (
        ControlPlane,
        build_control_plane,
        install_omegitops,
    )

    bin_dir = build_control_plane()
    workdir = tmp_path_factory.mktemp("controlplane")
    with ControlPlane(bin_dir, workdir) as cp:
        install_omegitops(cp)
        yield cp


@pytest.fixture(params=["sim", "controlplane"])
def backend(request, tmp_path):
    """Where a scenario of ``tests/backends.py`` runs: the simulated cluster, where
    ``advance`` jumps the clock, or the real control plane (skipped exactly when the
    tests of ``tests/controlplane/`` are), where it waits."""
    from tests.backends import ControlPlaneBackend, SimBackend

    if request.param == "sim":
        made = SimBackend(tmp_path)
    else:
        made = ControlPlaneBackend(request.getfixturevalue("control_plane"), tmp_path)
    yield made
    made.close()


RUNTIME = """
apiVersion: ome.io/v1beta1
kind: ClusterServingRuntime
metadata:
  name: srt-small
spec:
  engineConfig:
    runner:
      name: ome-container
      image: docker.io/lmsysorg/sglang:v0.5.5
      resources:
        limits:
          nvidia.com/gpu: 1
"""

SERVICE = """
apiVersion: ome.io/v1beta1
kind: InferenceService
metadata:
  name: small
  namespace: demo
spec:
  deploymentMode: OMENative
  model:
    name: small-model
  runtime:
    name: srt-small
  engine:
    minReplicas: 2
    maxReplicas: 2
"""
