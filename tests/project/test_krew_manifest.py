"""krew's manifest of ``kubectl ome`` (plugins/ome.yaml): the shape krew's index
validation asks (internal/index/validation/validate.go: apiVersion, kind, a name that
is the file's, a semantic version with its v, a one-line short description, platforms
with a uri to a .zip or .tar.gz, a lower-case sha256, a bin and an os/arch selector),
the package's version, and the sha256 of the archive plugins/archive.py builds."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "plugins" / "ome.yaml"
SEMVER = re.compile(r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")


def _archive():
    spec = importlib.util.spec_from_file_location("krew_archive", ROOT / "plugins" / "archive.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_manifest_has_krews_shape():
    plugin = yaml.safe_load(MANIFEST.read_text())
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert plugin["kind"] == "Plugin"
    assert plugin["metadata"]["name"] == MANIFEST.stem == "ome"
    spec = plugin["spec"]
    assert SEMVER.match(spec["version"]), spec["version"]
    assert spec["shortDescription"] and "\n" not in spec["shortDescription"]
    assert spec["description"].strip()
    assert spec["platforms"]
    for platform in spec["platforms"]:
        assert platform["uri"].endswith((".zip", ".tar.gz"))
        assert re.fullmatch(r"[a-f0-9]{64}", platform["sha256"])
        assert platform["bin"]
        assert all(f["from"] and f["to"] for f in platform["files"])
        selector = platform["selector"]
        keys = set(selector.get("matchLabels") or {}) | {
            e["key"] for e in selector.get("matchExpressions") or []}
        assert keys and keys <= {"os", "arch"}, selector


def test_the_manifest_is_the_packages_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    spec = yaml.safe_load(MANIFEST.read_text())["spec"]
    assert spec["version"] == f"v{version}"
    assert all(f"/download/v{version}/" in p["uri"] for p in spec["platforms"])


def test_the_sha256_is_the_archives_of_the_launcher(tmp_path):
    archive = _archive()
    platform, = yaml.safe_load(MANIFEST.read_text())["spec"]["platforms"]
    assert platform["sha256"] == archive.sha256(), (
        "plugins/kubectl-ome changed: put `python3 plugins/archive.py`'s sha256 in "
        "plugins/ome.yaml")
    target = tmp_path / "kubectl-ome.zip"
    target.write_bytes(archive.archive_bytes())
    with zipfile.ZipFile(target) as opened:
        (entry,) = opened.infolist()
        assert entry.filename == platform["bin"] == "kubectl-ome"
        assert (entry.external_attr >> 16) & 0o111


def test_the_launcher_runs_the_plugin_or_says_what_to_install(tmp_path):
    """With the package (in the Python $OMEGITOPS_PYTHON names): the plugin's help;
    with a Python that has none: the pip line."""
    launcher = str(ROOT / "plugins" / "kubectl-ome")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMEGITOPS_PYTHON": sys.executable}
    done = subprocess.run([launcher, "--help"], capture_output=True, text=True, env=env,
                          check=False)
    assert done.returncode == 0 and "usage: kubectl ome" in done.stdout, done.stderr
    empty = tmp_path / "bin"
    empty.mkdir()
    done = subprocess.run([launcher, "instance", "list"], capture_output=True, text=True,
                          env={"PATH": f"{empty}:/bin", "OMEGITOPS_PYTHON": "/bin/false"},
                          check=False)
    assert done.returncode == 1
    assert "pip install 'omegitops[kube]'" in done.stderr
