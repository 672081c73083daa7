"""A document without aliases is built by one walk of its tree (``construct_tree``), not
by PyYAML's generic construction: the same values, of the same types, in the same
order, for every manifest this project reads; and a scalar its tag cannot read is an
error at its own line and field, never a crash."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from omegitops.manifests.yamlfile import YamlError, _check_tree, _Loader, load_documents
from tests.conftest import EXAMPLES, REPO_ROOT, SHARED_OME, write_repo

CORPUS = REPO_ROOT / "tests" / "manifests" / "corpus"


def same(a, b) -> bool:
    """Equal, with every value (and key) of the same type and keys in the same order:
    ``1 == True == 1.0`` for Python, not for a manifest."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(type(k) is type(m) for k, m in zip(a, b)) \
            and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def both_ways(text: str) -> list[tuple[object, object]]:
    """Each document of ``text`` without aliases (those are built by PyYAML's own
    construction, which keeps what they share) built by PyYAML's construction and by
    ``construct_tree``, each from a tree of its own (flattening merge keys changes the
    tree). Documents ``load_documents`` refuses before building them are left out."""
    pairs = []
    generic, walked = _Loader(text), _Loader(text)
    try:
        while generic.check_node() and walked.check_node():
            node, twin = generic.get_node(), walked.get_node()
            if node is not None and not _check_tree(node)[1]:
                pairs.append((generic.construct_document(node), walked.construct_tree(twin)))
    finally:
        generic.dispose()
        walked.dispose()
    return pairs


def yaml_files() -> list[Path]:
    roots = [EXAMPLES, CORPUS] + ([SHARED_OME] if SHARED_OME.is_dir() else [])
    return sorted(p for root in roots for p in root.rglob("*") if p.suffix in (".yaml", ".yml"))


def test_every_manifest_here_is_built_as_pyyaml_builds_it():
    checked = 0
    for path in yaml_files():
        try:
            pairs = both_ways(path.read_text())
        except (yaml.YAMLError, YamlError, UnicodeDecodeError):
            continue  # the corpus's unreadable files: load_documents' own tests
        for generic, walked in pairs:
            assert same(generic, walked), path
            checked += 1
    assert checked > 50


@pytest.mark.parametrize("text", [
    "a: 1\nb: -0x1F\nc: 0o17\nd: 010\ne: 1_000\nf: +12\ng: 0b101\n",
    "a: 1.5\nb: .inf\nc: -.Inf\nd: .nan\ne: 1e3\nf: 6.8523015e+5\ng: 1_0.5\n",
    "a: yes\nb: No\nc: on\nd: OFF\ne: true\nf: False\ng: y\n",
    "a: ~\nb: null\nc:\nd: Null\n",
    "a: !!str 1\nb: !!int '7'\nc: !!float '2'\nd: !!bool 'yes'\ne: !!null ''\n",
    "1: a\ntrue: b\nnull: c\n2.5: d\n2001-12-14: e\n",
    "a: 2001-12-14t21:59:43.10-05:00\nb: 2002-12-14\nc: !!binary aGVsbG8=\n",
    "a: !!set {x, y}\nb: !!omap [{k: 1}, {j: 2}]\nc: !!pairs [{k: 1}, {k: 2}]\n",
    "a: [1, [2, [3, {b: [4]}]]]\nb: {}\nc: []\nd: ''\ne: \"quoted: yes\"\n",
    "= : value key\nother: 1\n",
    "a: 1\n<<: {b: 2, a: 3}\n",
    "<<: [{x: 1}, {x: 2, y: 3}]\nz: {<<: {q: 1}, r: 2}\n",
    "- a\n- 1\n- {b: c}\n",
    "just text\n",
    "a: 1:30\nb: 1:30.5\nc: 190:20:30\n",
])
def test_what_yaml_can_say_is_built_as_pyyaml_builds_it(text):
    pairs = both_ways(text)
    assert pairs
    for generic, walked in pairs:
        assert same(generic, walked), (generic, walked)


@pytest.mark.parametrize(("value", "tag", "cause"), [
    ("!!bool maybe", "bool", "KeyError"),
    ("!!int 1x", "int", "ValueError"),
    ('!!int ""', "int", "IndexError"),
    ("!!float abc", "float", "ValueError"),
    ('!!float ""', "float", "IndexError"),
    ("!!timestamp 2020-13-45", "timestamp", "ValueError"),
    ("!!timestamp nope", "timestamp", "AttributeError"),
])
def test_a_scalar_its_tag_cannot_read_is_an_error_at_its_field(value, tag, cause):
    text = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: {value}\n"
    with pytest.raises(YamlError) as err:
        list(load_documents(text))
    assert err.value.line == 6
    assert err.value.message.startswith("data.a: ")
    assert f"is not a valid !!{tag} ({cause}" in err.value.message


def test_in_a_document_with_aliases_too_it_is_an_error_not_a_crash():
    text = "base: &b {x: 1}\nother: *b\nwhen: !!timestamp nope\n"
    with pytest.raises(YamlError) as err:
        list(load_documents(text))
    assert err.value.line == 1
    assert "a value that cannot be read" in err.value.message


def test_aliases_still_share_what_they_point_at():
    (doc,) = load_documents("base: &b {x: [1]}\nother: *b\n")
    assert doc.data["other"] is doc.data["base"]


def test_the_other_files_are_still_read(tmp_path, capsys):
    from omegitops.cli import main

    write_repo(tmp_path, {
        "bad.yaml": """
        apiVersion: ome.io/v1beta1
        kind: ClusterServingRuntime
        metadata:
          name: bad
          labels:
            a: !!bool maybe
        """,
        "good.yaml": """
        apiVersion: ome.io/v1beta1
        kind: ClusterServingRuntime
        metadata:
          name: good
        """})
    assert main(["validate", "--repo", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "bad.yaml:6: metadata.labels.a: 'maybe' is not a valid !!bool" in out, out
    assert "good" in out


@pytest.mark.parametrize(("text", "json_only"), [
    ("a: 1\nb: [x, true, null, {c: -3}]\n", True),
    ("a: !!int '7'\nb: !!str 1.5\n", True),
    ("a: 1.0\n", False),
    ("a: [x, 2024-01-01]\n", False),
    ("a: !!binary aGVsbG8=\n", False),
    ("a: !!set {x}\n", False),
    ("a: &x [1]\nb: *x\n", False),  # built by PyYAML's construction: not looked at
])
def test_a_document_of_json_types_only_is_known_as_such(text, json_only):
    (doc,) = load_documents(text)
    assert doc.json_only is json_only


def test_what_is_not_json_is_still_made_json_or_refused(tmp_path):
    from omegitops.manifests.repository import read_repository

    write_repo(tmp_path, {"a.yaml": """
        apiVersion: ome.io/v1beta1
        kind: ClusterServingRuntime
        metadata:
          name: a
        spec:
          priority: 2.0
        """, "b.yaml": """
        apiVersion: ome.io/v1beta1
        kind: ClusterServingRuntime
        metadata:
          name: b
          labels:
            since: 2024-01-01
        """})
    repo = read_repository(tmp_path)
    (manifest,) = repo.manifests
    assert manifest.data["spec"]["priority"] == 2 and type(manifest.data["spec"]["priority"]) is int
    (error,) = repo.errors
    assert error.path == "b.yaml" and error.line == 6 and "read as a date" in error.message, error


def test_an_unhashable_key_is_refused_by_pyyaml_with_its_mark():
    # load_documents refuses a mapping or list as a key before building; the walk on
    # its own hands such a tree to PyYAML, which refuses it where the key is.
    loader = _Loader("a: 1\n? [x]\n: 2\n")
    try:
        node = loader.get_single_node()
        with pytest.raises(yaml.constructor.ConstructorError) as err:
            loader.construct_tree(node)
    finally:
        loader.dispose()
    assert "found unhashable key" in str(err.value)
    assert err.value.problem_mark.line == 1


def test_merge_keys_without_aliases_merge_as_kubectl_merges_them():
    (doc,) = load_documents("<<: [{x: 1}, {x: 2, y: 3}]\nx: 0\nz: {<<: {q: 1}, q: 2}\n")
    assert doc.data == {"x": 0, "y": 3, "z": {"q": 2}}
    (doc,) = load_documents("<<: [{x: 1}, {x: 2, y: 3}]\n")
    assert doc.data == {"x": 1, "y": 3}  # the first listed wins, as in go-yaml
