"""The image installs locked dependencies: ``requirements.lock`` (pip-compile
``--generate-hashes``) pins every runtime dependency of pyproject.toml, the extras the
image installs and the build backend, each by version and sha256, and the Dockerfile
installs from it alone, then the package on top with nothing more."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from docker.utils.build import exclude_paths
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements.lock"
DOCKERFILE = REPO / "Dockerfile"
# One locked requirement: `name==version \` then its `--hash=sha256:...` lines.
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\\n((?:\s+--hash=sha256:[0-9a-f]{64}"
                   r"(?: \\)?\n)+)", re.MULTILINE)


def locked() -> dict[str, tuple[Version, int]]:
    """Each locked distribution: its version and how many hashes it has."""
    return {canonicalize_name(name): (Version(version), hashes.count("--hash="))
            for name, version, hashes in ENTRY.findall(LOCK.read_text(encoding="utf-8"))}


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def image_requirements() -> list[Requirement]:
    """What the image needs: the dependencies, the extras of `[all]` and the build backend."""
    project = pyproject()["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    (all_extra,) = project["optional-dependencies"]["all"]
    for extra in sorted(Requirement(all_extra).extras):
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    wanted += [Requirement(r) for r in pyproject()["build-system"]["requires"]]
    return wanted


def test_every_line_of_the_lock_is_a_pin_with_hashes():
    text = LOCK.read_text(encoding="utf-8")
    requirement_lines = [line for line in text.splitlines()
                         if line and not line[0].isspace() and not line.startswith("#")]
    assert len(requirement_lines) == len(locked()) > 10, [
        line for line in requirement_lines if "==" not in line]
    assert all(hashes >= 1 for _, hashes in locked().values())
    assert "omegitops" not in locked(), "the package itself is not a dependency of the lock"
    assert "--find-links" not in text and "--index-url" not in text
    assert "by pip-compile with Python 3.11" in text, "locked for the image's Python"


def test_the_lock_covers_every_runtime_dependency_and_the_build_backend():
    pins = locked()
    for requirement in image_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"requirements.lock lacks {name}: regenerate it (see Dockerfile)"
        version, _ = pins[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {name}=={version}, pyproject.toml wants {requirement}")


def test_a_stale_lock_would_be_caught():
    pins = locked()
    (kube,) = [r for r in image_requirements() if r.name == "kubernetes"]
    assert kube.specifier.contains(pins["kubernetes"][0])
    assert not Requirement("kubernetes>=99").specifier.contains(pins["kubernetes"][0])


def run_lines() -> list[str]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    return [line.strip()[4:] for line in text.splitlines() if line.strip().startswith("RUN ")]


def test_the_image_installs_the_lock_then_the_package_alone():
    runs = run_lines()
    (from_lock,) = [r for r in runs if "-r requirements.lock" in r]
    assert "pip install --no-cache-dir --require-hashes -r requirements.lock" in from_lock
    (package,) = [r for r in runs if "'.[all]'" in r]
    assert "pip install --no-cache-dir --no-deps --no-build-isolation '.[all]'" in package
    assert "pip check" in package
    assert runs.index(from_lock) < runs.index(package)
    # The lock is copied before the sources: a code change keeps the dependencies' layer.
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert text.index("COPY requirements.lock") < text.index("COPY omegitops")


@pytest.mark.parametrize("needed", ["requirements.lock", "pyproject.toml", "README.md"])
def test_the_build_context_carries_the_lock(needed):
    patterns = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    assert needed in exclude_paths(str(REPO), patterns, dockerfile="Dockerfile")
