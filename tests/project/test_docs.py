"""The documentation: the README a user reads in minutes, and the docs site built from
``docs/`` (MkDocs, strict: a broken link or anchor is an error)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) < 200


def test_every_link_of_the_readme_leads_somewhere():
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert local, "the README links the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == []


def _mkdocs() -> str:
    found = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or \
        shutil.which("mkdocs")
    if found is None:
        pytest.fail("mkdocs is not installed: the test extra installs it")
    return found


def test_the_site_builds_with_no_broken_link(tmp_path):
    done = subprocess.run([_mkdocs(), "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "site" / "pull-requests" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path):
    """The check can fail: a page linking a page that is not there."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    (docs / "index.md").write_text("[gone](nowhere.md)\n", encoding="utf-8")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    done = subprocess.run([_mkdocs(), "build", "--strict", "--site-dir", str(tmp_path / "s")],
                          cwd=tmp_path, capture_output=True, text=True, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode != 0
    assert "nowhere.md" in done.stdout + done.stderr


@pytest.mark.skipif(not (ROOT.parent / "shared" / "ome").is_dir(),
                    reason="../shared/ome not present")
def test_what_the_docs_say_of_omes_released_crd_holds():
    # docs/ome-and-gitops.md: the released InferenceService CRD declares neither
    # spec.deploymentMode nor a component's lifecycle, so it refuses or prunes them.
    crd = yaml.safe_load((ROOT.parent / "shared" / "ome" / "crds" / "ome.io_inferenceservices.yaml")
                         .read_text(encoding="utf-8"))
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert "deploymentMode" not in spec
    for component in ("engine", "decoder", "router"):
        assert "lifecycle" not in spec.get(component, {}).get("properties", {}), component
    text = (ROOT / "docs" / "ome-and-gitops.md").read_text(encoding="utf-8")
    assert "declares neither\n`spec.deploymentMode` nor a component's `lifecycle`" in text
