"""The pre-scan of a file's namespaces (``--shard``) never leaves out what a shard needs.

Its one promise: when it names namespaces, the full read of the file finds objects
in those namespaces only, none cluster-scoped; when it names none, the full read
finds nothing at all (no object, no error). Checked on every YAML file the project
knows (the bad-input corpus, the examples, the OME catalogue, a generated fleet)
and on the shapes that could mislead a reader of document heads.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from omegitops.manifests.prescan import file_namespaces
from omegitops.manifests.repository import (
    NAMESPACED_KINDS,
    Repository,
    Within,
    _read_file,
    read_repository,
)
from omegitops.manifests.yamlfile import YamlError, load_text
from tests.conftest import EXAMPLES, SHARED_OME

HERE = Path(__file__).resolve().parent


def full_read(path: Path) -> Repository:
    repo = Repository(root=path.parent)
    _read_file(repo, path, None, Within(path.parent))
    return repo


def assert_promise(path: Path) -> frozenset[str] | None:
    try:
        text = load_text(path.read_bytes())
    except (YamlError, OSError):
        return None  # refused before any pre-scan: every shard reports it
    found = file_namespaces(text, NAMESPACED_KINDS)
    if found is None:
        return None
    repo = full_read(path)
    if not found:
        assert not repo.manifests and not repo.errors, path
    for manifest in repo.manifests:
        assert manifest.id.namespace in found, (path, manifest.id, found)
    for skipped in repo.skipped:
        assert skipped.kind != "ClusterServingRuntime", path
    return found


def yaml_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def test_the_promise_holds_on_the_bad_input_corpus_and_the_examples():
    files = yaml_files(HERE / "corpus") + yaml_files(EXAMPLES)
    answered = [f for f in files if assert_promise(f) is not None]
    assert len(files) > 100 and len(answered) > 50


@pytest.mark.skipif(not SHARED_OME.is_dir(), reason="../shared/ome not present")
def test_the_promise_holds_on_the_ome_catalogue():
    for path in yaml_files(SHARED_OME):
        assert_promise(path)


def test_a_generated_fleet_is_told_apart_file_by_file(tmp_path):
    sys.path.insert(0, str(HERE.parent / "bench"))
    try:
        import genfleet
    finally:
        sys.path.remove(str(HERE.parent / "bench"))
    genfleet.write_fleet(tmp_path, 40)
    services = yaml_files(tmp_path / "services")
    assert all(len(assert_promise(p) or ()) == 1 for p in services)


def scan(text: str) -> frozenset[str] | None:
    return file_namespaces(textwrap.dedent(text), NAMESPACED_KINDS)


HEAD = "apiVersion: ome.io/v1beta1\nkind: InferenceService\n"


@pytest.mark.parametrize("text,expected", [
    (HEAD + "metadata:\n  name: a\n  namespace: team-a\nspec: {}\n", {"team-a"}),
    (HEAD + "metadata:\n  name: a\n", {"default"}),
    (HEAD + "metadata:\n  name: a\n  namespace: null\n", {"default"}),
    (HEAD + "metadata: {name: a, namespace: 'team-b'}\n", {"team-b"}),
    (('{"apiVersion": "ome.io/v1beta1", "kind": "ServingRuntime", '
      '"metadata": {"namespace": "x", "name": "r"}}'), {"x"}),
    # kind after a long spec: still found, the spec passed over
    ("apiVersion: v1\nmetadata:\n  namespace: c\nspec:\n  a: [1, {b: 2}]\nkind: ConfigMap\n",
     {"c"}),
    (HEAD + "metadata:\n  namespace: a\n---\n" + HEAD + "metadata:\n  namespace: b\n...\n",
     {"a", "b"}),
    ("# only a comment\n---\n", set()),
    ("", set()),
])
def test_what_it_can_tell(text, expected):
    assert scan(text) == frozenset(expected)


@pytest.mark.parametrize("text", [
    # cluster-scoped: every shard's services may use it
    "apiVersion: ome.io/v1beta1\nkind: ClusterServingRuntime\nmetadata:\n  name: r\n",
    # no kind we know, no namespace: a kustomization, a values file
    "resources:\n- a.yaml\n",
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n",
    # what the full read takes as something else than the text
    HEAD + "metadata:\n  namespace: 2001-12-14\n",
    HEAD + "metadata:\n  namespace: 123\n",
    HEAD + "metadata:\n  namespace: !!str team-a\n",
    HEAD + "metadata:\n  namespace: Team_A\n",
    # anchors, aliases and merges are not followed
    HEAD + "metadata: &m\n  namespace: a\n",
    "base: &b {namespace: a}\n" + HEAD + "metadata:\n  <<: *b\n",
    HEAD + "metadata:\n  <<: {namespace: a}\n",
    HEAD.replace("kind: InferenceService", "kind: &k InferenceService") + "metadata: {}\n",
    # not a mapping, or not YAML
    "- a\n- b\n",
    "%YAML 1.1\n---\n" + HEAD + "metadata:\n  namespace: a\n",
    HEAD + "metadata:\n  namespace: [a\n",
    HEAD + "metadata:\n  namespace: a\n---\n- a list\n",
    # line breaks after which libyaml sees a document marker that a line-based split
    # would not: the second document could be in any namespace
    HEAD + "metadata:\n  namespace: a\r---\r" + HEAD + "metadata:\n  namespace: b\n",
    HEAD + "metadata:\n  namespace: a\n\u2028---\n" + HEAD,
    HEAD + "metadata:\n  namespace: a\n\ufeff---\n" + HEAD,
])
def test_what_it_leaves_to_every_shard(text):
    assert scan(text) is None


def test_a_shard_reads_only_the_files_with_its_namespaces(tmp_path):
    (tmp_path / "a.yaml").write_text(HEAD + "metadata:\n  name: s\n  namespace: mine\n")
    (tmp_path / "b.yaml").write_text(HEAD + "metadata:\n  name: s\n  namespace: theirs\n")
    (tmp_path / "c.yaml").write_text("apiVersion: ome.io/v1beta1\nkind: ClusterServingRuntime"
                                     "\nmetadata:\n  name: r\n")
    (tmp_path / "d.yaml").write_text(HEAD + "metadata:\n  namespace: theirs\n  bad: [\n")
    repo = read_repository(tmp_path, owns=lambda namespace: namespace == "mine")
    assert sorted(m.id.name for m in repo.manifests) == ["r", "s"]
    assert (repo.files, repo.other_shards_files) == (3, 1)
    # d.yaml is broken: the pre-scan cannot tell, so every shard reads it and reports it
    assert [e.path for e in repo.errors] == ["d.yaml"]
