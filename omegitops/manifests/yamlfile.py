"""Safe YAML loading that remembers where every value came from.

Each document is composed once into a node tree and constructed from that
same tree, so an error found later in the data (by a schema, or by a
cross-object check) can be traced back to its line without parsing twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from omegitops.util import files

try:  # libyaml's parser is several times faster; the constructor stays the safe one
    from yaml import CSafeLoader as _Parser
except ImportError:  # pragma: no cover - libyaml is missing on some platforms
    from yaml import SafeLoader as _Parser

# Bounds that keep hostile input cheap. A YAML alias is a pointer, so an
# "alias bomb" costs nothing to load but explodes in every later walk.
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_ALIASES = 100
MAX_DEPTH = 64
# Nodes a document may hold once its aliases are expanded: few aliases can
# still multiply (nine lists of nine references to the one before: 9**9).
MAX_EXPANDED_NODES = 200_000
# What aliases may add over a file's documents and over a whole repository: every
# later walk pays for each node an alias repeats, so a file of many documents each
# within the bounds above took minutes. Counted are the alias references and the
# nodes that exist only through them (a document's expanded size less its own nodes).
MAX_FILE_ALIASES = 1_000
MAX_FILE_ALIAS_NODES = 400_000
MAX_REPOSITORY_ALIASES = 50_000
MAX_REPOSITORY_ALIAS_NODES = 2_000_000
# Byte order marks of encodings YAML allows but Kubernetes tooling does not
# (UTF-32 first: its little-endian mark starts with UTF-16's).
_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


MERGE_TAG = "tag:yaml.org,2002:merge"
VALUE_TAG = "tag:yaml.org,2002:value"
STR_TAG = "tag:yaml.org,2002:str"
NULL_TAG = "tag:yaml.org,2002:null"
BOOL_TAG = "tag:yaml.org,2002:bool"
MAP_TAG = "tag:yaml.org,2002:map"
SEQ_TAG = "tag:yaml.org,2002:seq"
INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
# Longest integer read, in characters: Python refuses to convert one of more than
# 4,300 digits (to or from text) at all, and no Kubernetes field holds more than 64
# bits (20 characters).
MAX_INT_CHARS = 1000


class YamlError(Exception):
    """A file that is not usable YAML; carries the 1-based line where known."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass
class AliasBudget:
    """The alias references and alias-made nodes (see ``MAX_FILE_ALIASES``) a scope
    may still use: one per file, and one a repository's files share."""

    scope: str
    aliases: int
    nodes: int

    @classmethod
    def per_file(cls) -> AliasBudget:
        return cls("file", MAX_FILE_ALIASES, MAX_FILE_ALIAS_NODES)

    @classmethod
    def per_repository(cls) -> AliasBudget:
        return cls("repository", MAX_REPOSITORY_ALIASES, MAX_REPOSITORY_ALIAS_NODES)

    def spend(self, aliases: int, nodes: int, line: int) -> None:
        """Take a document's cost; YamlError (at ``line``) naming the bound it breaks."""
        self.aliases -= aliases
        self.nodes -= nodes
        per_file = self.scope == "file"
        if self.aliases < 0:
            limit = MAX_FILE_ALIASES if per_file else MAX_REPOSITORY_ALIASES
            raise YamlError(self._broken(f"more than {limit:,} alias references"), line)
        if self.nodes < 0:
            limit = MAX_FILE_ALIAS_NODES if per_file else MAX_REPOSITORY_ALIAS_NODES
            raise YamlError(self._broken(f"aliases that expand to more than {limit:,} "
                                         "nodes"), line)

    def _broken(self, what: str) -> str:
        if self.scope == "file":
            return (f"the file's documents together hold {what} (the bound per file; "
                    f"each document is held to {MAX_ALIASES} alias references and "
                    f"{MAX_EXPANDED_NODES:,} expanded nodes)")
        return (f"the repository's files together hold {what} (the bound per "
                "repository), and this file crosses it")


@dataclass
class Document:
    """One YAML document of a file: its data and the node tree it came from.

    The tree (every node with its marks: more memory than the data) is only needed
    to place errors; once validation has made them, ``release`` drops it, and the
    document keeps its own line.
    """

    index: int
    data: Any
    node: yaml.Node | None
    # The first mapping key YAML reads as something else than a string (found by the
    # same walk that checks the tree): see ``non_string_key``.
    non_string_key: yaml.ScalarNode | None = None
    # A document read from the load memo (``memo.py``) has no tree, only its line and a
    # way to compose the tree again, should an error need a field's line.
    first_line: int | None = None
    compose: Callable[[], yaml.Node | None] | None = field(default=None, repr=False)
    # Built of JSON's own types only (no float, date, bytes, set or pairs, which
    # ``construct_tree`` sees made): nothing for ``normalize_json`` to do.
    json_only: bool = False

    def __post_init__(self) -> None:
        if self.first_line is not None:
            self.line = self.first_line
        else:
            self.line = self.node.start_mark.line + 1 if self.node is not None else 1

    def release(self) -> None:
        self.node = None
        self.compose = None

    def line_of(self, path: tuple[str | int, ...]) -> int:
        """Line of the deepest field along ``path``: the line of its key (a
        nested mapping starts on the line after), or of a list item. A field
        that is absent reports its parent's line, where it would have to go.
        After ``release``, the document's line."""
        if self.node is None and self.compose is not None:
            self.node, self.compose = self.compose(), None
        if self.node is None:
            return self.line
        node, line = self.node, self.line
        for part in path:
            found = _child(node, part)
            if found is None:
                break
            key, node = found
            line = (key or node).start_mark.line + 1
        return line


def yaml_type(node: yaml.Node) -> str:
    """``tag:yaml.org,2002:timestamp`` -> ``timestamp``."""
    return str(node.tag).rsplit(":", 1)[-1]


def _child(node: yaml.Node, part: str | int) -> tuple[yaml.Node | None, yaml.Node] | None:
    """(key node, value node) of ``part`` under ``node``; the key is None in a list."""
    if isinstance(node, yaml.MappingNode):
        # The last of equal keys wins (a key given beside a ``<<`` merge overrides
        # the merged one), so search from the end.
        for key, value in reversed(node.value):
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return key, value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and (
        0 <= part < len(node.value)
    ):
        return None, node.value[part]
    return None


def list_items(doc: Document) -> list[Document] | None:
    """The items of a ``kind: List`` document (what ``kubectl get -o yaml`` writes), each
    a document of its own with its own node tree, as ``kubectl apply`` reads them; None
    for any other document."""
    data = doc.data
    if not (isinstance(data, dict) and data.get("kind") == "List"
            and data.get("apiVersion") == "v1" and isinstance(data.get("items"), list)):
        return None
    found = _child(doc.node, "items") if doc.node is not None else None
    nodes = found[1].value if found and isinstance(found[1], yaml.SequenceNode) else []
    items = []
    for position, item in enumerate(data["items"]):
        node = nodes[position] if position < len(nodes) else None
        key = doc.non_string_key
        inside = key is not None and node is not None and (
            node.start_mark.index <= key.start_mark.index < node.end_mark.index)
        items.append(Document(doc.index, item, node, key if inside else None,
                              json_only=doc.json_only))
    return items


class _Loader(_Parser):
    """The safe loader, reading as kubectl (go-yaml) reads: no base-60 numbers, and
    merge keys resolved as go-yaml resolves them, whatever PyYAML's own version does
    (6.0.4 lets the later mapping of ``<<: [*a, *b]`` win; go-yaml, and YAML's merge
    key spec, the earlier)."""

    # Whether the last tree ``construct_tree`` built holds JSON's own types only.
    json_only = False

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """Replace the ``<<`` keys of ``node`` by the pairs they merge, put first so
        that construction (where the last of equal keys wins) lets the mapping's own
        keys override every merged one, and of ``<<: [a, b]``, a's override b's."""
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        own: list[tuple[yaml.Node, yaml.Node]] = []
        for key, value in node.value:
            if key.tag != MERGE_TAG:
                if key.tag == VALUE_TAG:
                    key.tag = STR_TAG
                own.append((key, value))
                continue
            sources = value.value if isinstance(value, yaml.SequenceNode) else [value]
            pairs: list[tuple[yaml.Node, yaml.Node]] = []
            for source in reversed(sources):  # the first listed goes last: it wins
                if not isinstance(source, yaml.MappingNode):
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"expected a mapping or list of mappings for merging, but found "
                        f"{source.id}", source.start_mark)
                self.flatten_mapping(source)
                pairs.extend(source.value)
            merged.extend(pairs)
        if len(own) != len(node.value):
            node.value = merged + own

    def construct_tree(self, root: yaml.Node) -> Any:
        """The data of a document whose tree holds no alias: what ``construct_document``
        builds, the same values of the same types in the same order, built by one
        walk instead of PyYAML's generic dispatch (generators and a memo per node, made
        for the recursive structures only aliases can make): a third of its time.
        Scalars of the safe tags go through the safe constructor's own methods, and
        anything else (a timestamp, a set, an unknown tag) through PyYAML itself.
        _Unreadable for a value no constructor can read."""
        self.json_only = True
        try:
            return self._plain(root)
        except TypeError:
            # An unhashable key (a set or a mapping as a key): PyYAML's own
            # construction refuses it with its mark.
            self._reset()
            self.json_only = False
            return self.construct_document(root)
        finally:
            self._reset()

    def _plain(self, node: yaml.Node) -> Any:
        kind, tag = node.__class__, node.tag
        if kind is yaml.ScalarNode:
            if tag == STR_TAG:
                return node.value
            if tag == NULL_TAG:
                return None
        elif kind is yaml.MappingNode and tag == MAP_TAG:
            self.flatten_mapping(node)
            plain = self._plain
            return {plain(key): plain(value) for key, value in node.value}
        elif kind is yaml.SequenceNode and tag == SEQ_TAG:
            plain = self._plain
            return [plain(item) for item in node.value]
        # Anything but a str, null, map or seq: a bool or an int is JSON's too, a float
        # may need making an integer, and the rest is not JSON at all.
        self.json_only = self.json_only and tag in (BOOL_TAG, INT_TAG)
        try:
            reader = self._scalar_readers.get(tag) if kind is yaml.ScalarNode else None
            return reader(self, node) if reader else self.construct_object(node, deep=True)
        except yaml.MarkedYAMLError:
            raise
        except Exception as err:  # noqa: BLE001 - each tag's constructor fails its own way
            # ``!!bool maybe`` (KeyError), ``!!float ""`` (IndexError), ``!!timestamp
            # 2020-13-45`` (ValueError), an integer past Python's bounds: the value's
            # own line and field, not a crash.
            raise _Unreadable(node, err) from None

    # The safe constructor's plain methods for the scalars manifests hold (no
    # generator, no memo): called directly.
    _scalar_readers: ClassVar[dict[str, Callable[[Any, yaml.Node], Any]]] = {
        BOOL_TAG: yaml.constructor.SafeConstructor.construct_yaml_bool,
        INT_TAG: yaml.constructor.SafeConstructor.construct_yaml_int,
        FLOAT_TAG: yaml.constructor.SafeConstructor.construct_yaml_float,
    }

    def _reset(self) -> None:
        """The constructor's state as ``construct_document`` leaves it."""
        self.state_generators.clear()
        self.constructed_objects.clear()
        self.recursive_objects.clear()
        self.deep_construct = False


class _Unreadable(Exception):
    """A scalar its tag's constructor cannot read (``_Loader.construct_tree``)."""

    def __init__(self, node: yaml.Node, error: Exception):
        super().__init__(str(error))
        self.node = node
        self.error = error


def _without_base_60(resolvers: dict) -> dict:
    """YAML 1.1's implicit resolvers with the int and float patterns kept from matching
    a value that holds a colon: go-yaml, which kubectl reads manifests with, takes
    ``1:30`` for a string, not for 90 (YAML 1.1's base 60), and so does this loader.
    In the table, not in an override of ``resolve``: the parser asks it for every plain
    scalar (600,000 of them in 10,000 services)."""
    def kept(tag: str, pattern: re.Pattern) -> tuple[str, re.Pattern]:
        if tag not in (INT_TAG, FLOAT_TAG):
            return tag, pattern
        return tag, re.compile("^(?![^:]*:)" + pattern.pattern.removeprefix("^"),
                               pattern.flags)
    return {first: [kept(tag, pattern) for tag, pattern in entries]
            for first, entries in resolvers.items()}


_Loader.yaml_implicit_resolvers = _without_base_60(_Parser.yaml_implicit_resolvers)


def load_documents(text: str, repository: AliasBudget | None = None) -> Iterator[Document]:
    """Yield every non-empty document of ``text``; raise YamlError on the first bad one.
    What its aliases add is held to the bounds per document, per file, and, with
    ``repository``, to what is left of the repository's."""
    loader = _Loader(text)
    per_file = AliasBudget.per_file()
    try:
        index = 0
        while True:
            try:
                if not loader.check_node():
                    return
                node = loader.get_node()
            except yaml.MarkedYAMLError as err:
                raise _marked(err, text) from None
            except yaml.reader.ReaderError as err:
                raise _unreadable(err, text) from None
            except yaml.YAMLError as err:
                raise YamlError(_clip(str(err))) from None
            if node is None:
                continue
            odd_keys, aliases, alias_nodes = _check_tree(node)
            if aliases:
                line = node.start_mark.line + 1
                per_file.spend(aliases, alias_nodes, line)
                if repository is not None:
                    repository.spend(aliases, alias_nodes, line)
            try:
                # Aliases share what they point at: PyYAML's construction keeps that.
                if aliases:
                    data, json_only = loader.construct_document(node), False
                else:
                    data, json_only = loader.construct_tree(node), loader.json_only
            except yaml.MarkedYAMLError as err:
                raise _marked(err, text) from None
            except _Unreadable as err:
                raise _unreadable_value(node, err) from None
            except (ValueError, OverflowError, KeyError, IndexError, AttributeError) as err:
                # A value the constructor cannot build, in a document with aliases:
                # the document's line.
                raise YamlError(_clip(f"a value that cannot be read: {err}"),
                                node.start_mark.line + 1) from None
            if data is not None:
                first = min(odd_keys, key=lambda k: (k.start_mark.line, k.start_mark.column),
                            default=None)
                yield Document(index=index, data=data, node=node, non_string_key=first,
                               json_only=json_only)
            index += 1
    finally:
        loader.dispose()


def node_at(text: str, index: int) -> yaml.Node | None:
    """The node tree of the document ``load_documents`` numbered ``index``: for a
    document read from the memo, whose tree was not kept."""
    loader = _Loader(text)
    try:
        seen = 0
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            if seen == index:
                return node
            seen += 1
        return None
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()


def read_limited(path: Path | str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (``files.read_limited``);
    YamlError for anything else. OSError (missing, unreadable) is the caller's."""
    try:
        return files.read_limited(path, max_bytes)
    except files.NotARegularFile as err:
        raise YamlError(err.message) from None


def load_text(raw: bytes, max_bytes: int = MAX_FILE_BYTES) -> str:
    """Decode a file's bytes, refusing what no manifest can be."""
    if len(raw) > max_bytes:
        raise YamlError(f"file is {len(raw)} bytes, larger than the limit of {max_bytes}")
    for bom, encoding in _WIDE_BOMS:
        if raw.startswith(bom):
            raise YamlError(f"{encoding} text; manifests must be saved as UTF-8")
    if b"\x00" in raw:
        raise YamlError("binary file (contains NUL bytes), not YAML")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise YamlError(f"not UTF-8 text: {err.reason} at byte {err.start}", line) from None


def _marked(err: yaml.MarkedYAMLError, text: str | None = None) -> YamlError:
    mark = err.problem_mark or err.context_mark
    problem = err.problem or str(err)
    if err.context and err.context not in problem:
        problem = f"{err.context}: {problem}"
    if text is not None and mark is not None and _tab_at(text, mark):
        problem = f"{problem.strip()} (a tab character: YAML indents with spaces only)"
    start = err.context_mark
    if mark is not None and start is not None and start.line < mark.line:
        # An unclosed bracket or quote is found where the file ends: say where it opened.
        problem = f"{problem.strip()} (started at line {start.line + 1})"
    return YamlError(_clip(problem.strip()), mark.line + 1 if mark else None)


def _unreadable(err: yaml.reader.ReaderError, text: str) -> YamlError:
    """A character YAML refuses (a control character), at its line and column: the
    reader names only its offset in the text."""
    before = text[:err.position]
    line = before.count("\n") + 1
    column = err.position - (before.rfind("\n") + 1) + 1
    return YamlError(_clip(f"{err.reason} (character #x{err.character:04x}, column {column})"
                           if isinstance(err.character, int) else err.reason), line)


def _unreadable_value(root: yaml.Node, err: _Unreadable) -> YamlError:
    """``metadata.labels.a: 'maybe' is not a valid !!bool (KeyError: 'maybe')``, at the
    value's line."""
    node = err.node
    shown = node.value if isinstance(node, yaml.ScalarNode) else node.id
    return YamlError(_clip(f"{_field_of(root, node)}{shown!r} is not a valid "
                           f"!!{yaml_type(node)} ({err.error.__class__.__name__}: {err})"),
                     node.start_mark.line + 1)


def _tab_at(text: str, mark: yaml.Mark) -> bool:
    """Whether the character at ``mark`` is a tab (libyaml's marks carry no buffer)."""
    lines = text.splitlines()
    if not 0 <= mark.line < len(lines):
        return False
    line = lines[mark.line]
    return 0 <= mark.column < len(line) and line[mark.column] == "\t"


def _clip(text: str, limit: int = 200) -> str:
    """Keep messages to a line: a hostile key or value is not echoed whole."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_tree(root: yaml.Node) -> tuple[list[yaml.ScalarNode], int, int]:
    """Reject duplicate keys, deep nesting and alias bombs before constructing; return
    the mapping keys that YAML reads as something other than a string (``1``, ``true``,
    ``null``, a date), the alias references, and the nodes that exist only through
    them. Merge keys count as strings: ``<<`` is YAML's own.

    PyYAML keeps the last of two equal keys without a word; a manifest with
    both is ambiguous, so it is an error here as it is for kubectl.
    """
    odd_keys: list[yaml.ScalarNode] = []
    seen: set[int] = set()
    aliases = 0
    stack: list[tuple[yaml.Node, int]] = [(root, 0)]
    # Bound once: this loop visits every node of every document (a tenth of a load).
    pop, push, remember = stack.pop, stack.append, seen.add
    scalar, mapping, sequence = yaml.ScalarNode, yaml.MappingNode, yaml.SequenceNode
    while stack:
        node, depth = pop()
        if id(node) in seen:
            aliases += 1
            if aliases > MAX_ALIASES:
                raise YamlError(
                    f"more than {MAX_ALIASES} alias references in one document (the bound per "
                    "document)", node.start_mark.line + 1
                )
            continue
        remember(id(node))
        kind = node.__class__
        if kind is scalar and node.tag == INT_TAG and len(node.value) > MAX_INT_CHARS:
            raise YamlError(_clip(
                f"{_field_of(root, node)}an integer of {len(node.value)} characters, more "
                f"than the {MAX_INT_CHARS} read: no Kubernetes field holds one (64-bit); "
                "quote it if it is text"), node.start_mark.line + 1)
        if depth > MAX_DEPTH:
            raise YamlError(f"nested deeper than {MAX_DEPTH} levels", node.start_mark.line + 1)
        if kind is mapping:
            keys: dict[str, int] = {}
            inner = depth + 1
            for key, value in node.value:
                if key.__class__ is not scalar:
                    found = "mapping" if isinstance(key, mapping) else "sequence"
                    raise YamlError(
                        f"a mapping key must be a string, found a {found}",
                        key.start_mark.line + 1,
                    )
                tag = key.tag
                if tag != MERGE_TAG:
                    if tag != STR_TAG:
                        odd_keys.append(key)
                    if key.value in keys:
                        raise YamlError(
                            _clip(f"duplicate key {key.value!r} (first at line "
                                  f"{keys[key.value]})"),
                            key.start_mark.line + 1,
                        )
                    keys[key.value] = key.start_mark.line + 1
                push((key, inner))
                push((value, inner))
        elif kind is sequence:
            inner = depth + 1
            for item in node.value:
                push((item, inner))
    if not aliases:
        return odd_keys, 0, 0
    # Without aliases the walk above saw the whole expanded tree already; the
    # bottom-up count is only needed (and only paid for) when a node repeats.
    return odd_keys, aliases, _expanded_size(root) - len(seen)


def _field_of(root: yaml.Node, target: yaml.Node) -> str:
    """``spec.engine.args[2]: ``, the field that holds ``target`` (looked for only once
    an error is found there); empty when it is not found or is the root."""
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if node is target:
            return f"{path}: " if path else ""
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                stack.append((value, f"{path}.{name}" if path else str(name)))
                stack.append((key, path))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
    return ""


def _expanded_size(root: yaml.Node) -> int:
    """Refuse a document too big or too deep once every alias is expanded.

    The walk above sees each node once, so an alias to a deep node from deep
    inside another reads as shallow there, and nine lists of nine references
    to the one before read as 81 nodes. Here each node's expanded size and
    height are computed bottom-up (iteratively: the expanded height is what is
    being bounded). The first node found too big is the innermost such, so
    its line is where the multiplication happens. Returns the root's expanded size.
    """
    sizes: dict[int, tuple[int, int]] = {}
    # Nodes being expanded: the path from the root to the node at hand, since a node's
    # finishing entry sits on the stack below all of its descendants' entries.
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in sizes:
            continue
        if not expanded:
            if id(node) in open_nodes:
                # ``x: &a [*a]``: no depth bound ends the expansion of a loop.
                raise YamlError("an alias refers to a node that contains it (an endless "
                                "loop)", node.start_mark.line + 1)
            open_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        if not expanded:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        size = 1 + sum(sizes[id(child)][0] for child in children)
        height = 1 + max((sizes[id(child)][1] for child in children), default=0)
        line = node.start_mark.line + 1
        if size > MAX_EXPANDED_NODES:
            raise YamlError(f"aliases expand to more than {MAX_EXPANDED_NODES} nodes in one "
                            "document (the bound per document)", line)
        if height > MAX_DEPTH + 1:
            raise YamlError(f"aliases nest deeper than {MAX_DEPTH} levels", line)
        sizes[id(node)] = (size, height)
    return sizes[id(root)][0]
