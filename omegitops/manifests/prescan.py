"""Which namespaces a manifest file holds, read from the head of each document.

A ``--shard`` reconciles only its own namespaces, yet which namespaces a file
holds is known only once it is read, and reading (composing with line marks,
checking, constructing) is most of a shard's load. This pre-scan answers the
question for a fraction of that: each document's YAML events (libyaml's
parser) are read only until its ``kind`` and ``metadata`` are known, which in
a manifest are its first lines, and the rest of the document is never turned
into Python objects.

The answer is conservative. Whenever it cannot be certain (an anchor, an
alias, a merge key or a tag where it looks; a document that is not a
mapping; a cluster-scoped object, which every shard needs; an object of a
kind it does not know with no namespace; anything libyaml refuses; a
directive) it answers None: every shard reads the file, exactly as without the
pre-scan. So a file is left out of a shard only when every document in it
names a namespace the shard does not own, and a broken file is always read
(and its errors reported) by at least one shard that a merge of their reports
keeps them from.
"""

from __future__ import annotations

import re

import yaml

try:
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - libyaml is missing on some platforms
    from yaml import SafeLoader as _Loader

_RESOLVER = yaml.resolver.Resolver()
_STR = "tag:yaml.org,2002:str"

# A document starts at a line that is ``---`` (or ends at ``...``), alone or followed by
# a space: YAML's document markers are such lines wherever they appear.
_MARKER = re.compile(r"^(?:---|\.\.\.)(?=[ \t\r\n]|$)", re.MULTILINE)
_DIRECTIVE = re.compile(r"^%", re.MULTILINE)
# Line breaks libyaml knows and the markers above would not see (a lone CR, NEL, the
# Unicode line and paragraph separators), and a byte order mark, which may open a
# document: with any of them a chunk could hold two documents.
_ODD_BREAKS = re.compile("\r(?!\n)|[\x85\u2028\u2029\ufeff]")
# A namespace as the API server takes it (a DNS-1123 label): anything else is left to
# the full read, which reports it.
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DEFAULT_NAMESPACE = "default"


class _Unknown(Exception):
    """The pre-scan cannot tell: every shard reads the file."""


def file_namespaces(text: str, namespaced: tuple[str, ...]) -> frozenset[str] | None:
    """The namespaces of every object in ``text`` (a file's decoded text), or None
    when that cannot be told from the documents' heads. Objects of the ``namespaced``
    kinds without a namespace are in ``default``, as the full read takes them."""
    if _DIRECTIVE.search(text) or _ODD_BREAKS.search(text):
        return None
    found: set[str] = set()
    try:
        for chunk in _MARKER.split(text):
            namespace = _document_namespace(chunk, namespaced)
            if namespace is not None:
                found.add(namespace)
    except (_Unknown, yaml.YAMLError, StopIteration):  # StopIteration: a stream cut short
        return None
    return frozenset(found)


def _document_namespace(chunk: str, namespaced: tuple[str, ...]) -> str | None:
    """The namespace of the one document in ``chunk``; None for an empty document."""
    events = yaml.parse(chunk, Loader=_Loader)
    try:
        _expect(next(events), yaml.StreamStartEvent)
        first = next(events)
        if isinstance(first, yaml.StreamEndEvent):
            return None
        _expect(first, yaml.DocumentStartEvent)
        root = next(events)
        if isinstance(root, yaml.ScalarEvent) and _plain(root) and root.value in ("", "~",
                                                                                  "null"):
            return None  # an empty document: nothing is loaded from it
        _expect(root, yaml.MappingStartEvent)
        kind, metadata = _head(events)
    finally:
        events.close()
    namespace = metadata.get("namespace")
    if kind in namespaced:
        return namespace or DEFAULT_NAMESPACE
    if namespace is None:
        # A cluster-scoped object (a ClusterServingRuntime, which every shard's services
        # may use), or a document that is no object at all: all shards read it.
        raise _Unknown
    return namespace


def _head(events) -> tuple[str | None, dict[str, str]]:
    """(kind, the metadata fields read) from the top-level mapping's first keys."""
    kind: str | None = None
    metadata: dict[str, str] | None = None
    while kind is None or metadata is None:
        key = next(events)
        if isinstance(key, yaml.MappingEndEvent):
            break
        name = _key(key)
        if name == "kind":
            kind = _scalar(next(events))
        elif name == "metadata":
            metadata = _metadata(events)
        else:
            _skip(events)
    return kind, metadata or {}


def _metadata(events) -> dict[str, str]:
    _expect(next(events), yaml.MappingStartEvent)
    fields: dict[str, str] = {}
    while True:
        key = next(events)
        if isinstance(key, yaml.MappingEndEvent):
            return fields
        name = _key(key)
        if name == "namespace":
            event = next(events)
            if isinstance(event, yaml.ScalarEvent) and _plain(event) \
                    and event.value in ("", "~", "null", "Null", "NULL"):
                continue  # ``namespace: null`` is no namespace, as the full read takes it
            value = _scalar(event)
            if not _NAMESPACE.match(value):
                raise _Unknown
            fields["namespace"] = value
        else:
            _skip(events)


def _key(event) -> str:
    if not isinstance(event, yaml.ScalarEvent) or event.value == "<<":
        raise _Unknown  # a complex key or a merge: left to the full read
    _plain_node(event)
    return event.value


def _scalar(event) -> str:
    """The text of a scalar that the full read takes as that same string."""
    if not isinstance(event, yaml.ScalarEvent):
        raise _Unknown
    _plain_node(event)
    return event.value


def _plain_node(event: yaml.ScalarEvent) -> None:
    """No anchor, no explicit tag, and (unquoted) not a number, bool, null or date:
    the value is the string it reads as."""
    if event.anchor is not None or event.tag is not None:
        raise _Unknown
    if event.implicit[0] and \
            _RESOLVER.resolve(yaml.ScalarNode, event.value, (True, False)) != _STR:
        raise _Unknown


def _plain(event: yaml.ScalarEvent) -> bool:
    """Unquoted, with no anchor or tag: read by YAML's implicit rules (``null``, ``1``)."""
    return event.anchor is None and event.tag is None and event.implicit[0]


def _skip(events) -> None:
    """Pass over one value, however nested; an alias or anchor in it is not followed."""
    depth = 0
    while True:
        event = next(events)
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Unknown
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        if depth == 0:
            return


def _expect(event, kind) -> None:
    if not isinstance(event, kind) or getattr(event, "anchor", None) is not None \
            or getattr(event, "tag", None) is not None:
        raise _Unknown
