import pytest

from omegitops.manifests.yamlfile import YamlError, load_documents, load_text


def docs(text):
    return list(load_documents(text))


def test_lines_are_traced_back_to_fields():
    (doc,) = docs("a: 1\nspec:\n  engine:\n    lifecycle:\n      minReadySeconds: -5\n")
    assert doc.line_of(("spec", "engine", "lifecycle", "minReadySeconds")) == 5
    # An absent field reports its parent's line, where it would have to go.
    assert doc.line_of(("spec", "engine", "missing")) == 3


def test_multi_document_files_keep_their_own_lines():
    first, second = docs("a: 1\n---\nb:\n  c: 2\n")
    assert first.line == 1 and second.line == 3
    assert second.line_of(("b", "c")) == 4


def test_empty_documents_are_skipped():
    assert [d.data for d in docs("---\n---\na: 1\n")] == [{"a": 1}]


def test_duplicate_keys_are_an_error_with_both_lines():
    with pytest.raises(YamlError) as err:
        docs("metadata:\n  name: a\n  name: b\n")
    assert err.value.line == 3
    assert "duplicate key 'name' (first at line 2)" in err.value.message


def test_malformed_yaml_names_the_line():
    with pytest.raises(YamlError) as err:
        docs("a: [1, 2\nb: 3\n")
    assert err.value.line is not None


def test_tags_that_construct_objects_are_refused():
    with pytest.raises(YamlError) as err:
        docs("a: !!python/object/apply:os.system ['true']\n")
    assert "python/object" in err.value.message


def test_alias_bomb_is_refused():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    with pytest.raises(YamlError, match="alias"):
        docs("\n".join(lines) + "\n")


def test_deep_nesting_is_refused():
    with pytest.raises(YamlError, match="nested deeper"):
        docs("a: " + "[" * 100 + "]" * 100 + "\n")


def test_binary_and_oversized_files_are_refused():
    with pytest.raises(YamlError, match="binary"):
        load_text(b"\x00\x01\x02")
    with pytest.raises(YamlError, match="larger than the limit"):
        load_text(b"a: 1\n" * 10, max_bytes=8)
    with pytest.raises(YamlError, match="not UTF-8"):
        load_text(b"a: \xff\xfe\n")
