"""Safe YAML loading that remembers where every value came from.

Each document is composed once into a node tree and constructed from that
same tree, so an error found later in the data (by a schema, or by a
cross-object check) can be traced back to its line without parsing twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

try:  # libyaml's parser is several times faster; the constructor stays the safe one
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - libyaml is missing on some platforms
    from yaml import SafeLoader as _Loader

# Bounds that keep hostile input cheap. A YAML alias is a pointer, so an
# "alias bomb" costs nothing to load but explodes in every later walk.
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_ALIASES = 100
MAX_DEPTH = 64


class YamlError(Exception):
    """A file that is not usable YAML; carries the 1-based line where known."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass
class Document:
    """One YAML document of a file: its data and the node tree it came from."""

    index: int
    data: Any
    node: yaml.Node

    @property
    def line(self) -> int:
        return self.node.start_mark.line + 1

    def line_of(self, path: tuple[str | int, ...]) -> int:
        """Line of the deepest field along ``path``: the line of its key (a
        nested mapping starts on the line after), or of a list item. A field
        that is absent reports its parent's line, where it would have to go."""
        node, line = self.node, self.node.start_mark.line + 1
        for part in path:
            found = _child(node, part)
            if found is None:
                break
            key, node = found
            line = (key or node).start_mark.line + 1
        return line


def _child(node: yaml.Node, part: str | int) -> tuple[yaml.Node | None, yaml.Node] | None:
    """(key node, value node) of ``part`` under ``node``; the key is None in a list."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return key, value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and (
        0 <= part < len(node.value)
    ):
        return None, node.value[part]
    return None


def load_documents(text: str) -> Iterator[Document]:
    """Yield every non-empty document of ``text``; raise YamlError on the first bad one."""
    loader = _Loader(text)
    try:
        index = 0
        while True:
            try:
                if not loader.check_node():
                    return
                node = loader.get_node()
            except yaml.MarkedYAMLError as err:
                raise _marked(err) from None
            except yaml.YAMLError as err:
                raise YamlError(str(err)) from None
            if node is None:
                continue
            _check_tree(node)
            try:
                data = loader.construct_document(node)
            except yaml.MarkedYAMLError as err:
                raise _marked(err) from None
            if data is not None:
                yield Document(index=index, data=data, node=node)
            index += 1
    finally:
        loader.dispose()


def load_text(raw: bytes, max_bytes: int = MAX_FILE_BYTES) -> str:
    """Decode a file's bytes, refusing what no manifest can be."""
    if len(raw) > max_bytes:
        raise YamlError(f"file is {len(raw)} bytes, larger than the limit of {max_bytes}")
    if b"\x00" in raw:
        raise YamlError("binary file (contains NUL bytes), not YAML")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise YamlError(f"not UTF-8 text: {err.reason} at byte {err.start}") from None


def _marked(err: yaml.MarkedYAMLError) -> YamlError:
    mark = err.problem_mark or err.context_mark
    problem = err.problem or str(err)
    if err.context and err.context not in problem:
        problem = f"{err.context}: {problem}"
    return YamlError(problem.strip(), mark.line + 1 if mark else None)


def _check_tree(root: yaml.Node) -> None:
    """Reject duplicate keys, deep nesting and alias bombs before constructing.

    PyYAML keeps the last of two equal keys without a word; a manifest with
    both is ambiguous, so it is an error here as it is for kubectl.
    """
    seen: set[int] = set()
    aliases = 0
    stack: list[tuple[yaml.Node, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            aliases += 1
            if aliases > MAX_ALIASES:
                raise YamlError(
                    f"more than {MAX_ALIASES} alias references", node.start_mark.line + 1
                )
            continue
        seen.add(id(node))
        if depth > MAX_DEPTH:
            raise YamlError(f"nested deeper than {MAX_DEPTH} levels", node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            keys: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in keys:
                        raise YamlError(
                            f"duplicate key {key.value!r} (first at line {keys[key.value]})",
                            key.start_mark.line + 1,
                        )
                    keys[key.value] = key.start_mark.line + 1
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, depth + 1) for item in node.value)
