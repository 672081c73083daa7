"""The package a user installs is whole: the wheel built from exactly the files the
image's build sees (``.dockerignore`` applied) carries every module, schema and
template of ``omegitops/``, as real files.

The schemas used to be a symlink to ``../schemas``, which the build context does not
hold: the image's wheel had no schema, and every command but ``--help`` failed in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from docker.utils.build import exclude_paths

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "omegitops"


def build_context(dest: Path) -> Path:
    """Copy what a container build of ``REPO`` receives, by docker's own reading of
    ``.dockerignore``; a symbolic link is copied as a link, as the build sends it."""
    patterns = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [p.strip() for p in patterns if p.strip() and not p.startswith("#")]
    for rel in sorted(exclude_paths(str(REPO), patterns, dockerfile="Dockerfile")):
        source, target = REPO / rel, dest / rel
        if source.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(source), target)
        elif source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


def package_files() -> set[str]:
    """Every file of the package in the work tree that an install must carry."""
    wanted = set()
    # Through folder links too: what the work tree shows is what an install must hold.
    for folder, dirs, files in os.walk(PACKAGE, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if Path(name).suffix in {".py", ".json", ".j2"}:
                rel = (Path(folder) / name).relative_to(REPO)
                wanted.add(rel.as_posix())
    return wanted


def test_the_package_holds_no_symbolic_link():
    links = [p.relative_to(REPO).as_posix() for p in PACKAGE.rglob("*") if p.is_symlink()]
    assert links == [], f"package data must be real files, not links: {links}"


def test_the_schemas_and_templates_are_package_data():
    assert sorted(p.name for p in (PACKAGE / "schemas").glob("*.schema.json")) == [
        "clusterservingruntime.schema.json", "inferencereplica.schema.json",
        "inferenceservice.schema.json", "operator-values.schema.json",
        "servingruntime.schema.json", "status-report.schema.json"]
    assert list((PACKAGE / "report" / "templates").glob("*.j2"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    context = build_context(tmp_path_factory.mktemp("context"))
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps",
         "--quiet", "--wheel-dir", str(dist), str(context)],
        capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (built,) = dist.glob("omegitops-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_the_wheel_from_the_image_context_carries_every_schema_and_template(wheel):
    inside = set(wheel.namelist())
    missing = sorted(package_files() - inside)
    assert missing == [], f"the wheel the image installs lacks {missing}"


def test_the_wheel_carries_nothing_outside_the_package(wheel):
    top = {name.split("/", 1)[0] for name in wheel.namelist()}
    assert {t for t in top if not t.endswith(".dist-info")} == {"omegitops"}
