"""Label and field selectors as the API server parses them (for the API double).

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``,
``a notin (x,y)``, joined by commas. Field selectors: ``path=value``,
``path==value``, ``path!=value`` over the fields each resource supports.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Predicate = Callable[[dict], bool]

_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\((.*)\)\s*$")
_EQUALITY = re.compile(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")

# Fields every resource can be selected by, and the extra ones of some.
COMMON_FIELDS = {"metadata.name", "metadata.namespace"}
EXTRA_FIELDS = {
    "events": {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
               "involvedObject.uid", "involvedObject.apiVersion", "reason", "type",
               "source", "reportingComponent"},
    "pods": {"spec.nodeName", "status.phase", "spec.restartPolicy", "status.podIP"},
}


class SelectorError(ValueError):
    """A selector the API server would refuse (HTTP 400)."""


def _split(text: str) -> list[str]:
    """Split at commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def label_selector(text: str | None) -> Predicate:
    """A predicate over objects for a label selector; everything matches an empty one."""
    tests = [_label_requirement(part) for part in _split(text or "")]

    def matches(obj: dict) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(test(labels) for test in tests)

    return matches


def _label_requirement(part: str) -> Callable[[dict], bool]:
    if match := _SET.match(part):
        key, op, values = match.group(1), match.group(2), {
            v.strip() for v in match.group(3).split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQUALITY.match(part):
        key, op, value = match.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS.match(part):
        negate, key = match.groups()
        if negate:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement: {part!r}")


def field_selector(text: str | None, plural: str) -> Predicate:
    """A predicate for a field selector over the fields ``plural`` supports."""
    allowed = COMMON_FIELDS | EXTRA_FIELDS.get(plural, set())
    tests = []
    for part in _split(text or ""):
        match = _EQUALITY.match(part)
        if not match:
            raise SelectorError(f"invalid field selector: {part!r}")
        path, op, value = match.groups()
        if path not in allowed:
            raise SelectorError(f'field label not supported: "{path}"')
        tests.append((path, op == "!=", value))

    def matches(obj: dict) -> bool:
        return all((_field(obj, path) != value) if negate else (_field(obj, path) == value)
                   for path, negate, value in tests)

    return matches


def _field(obj: dict, path: str) -> str:
    value = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, dict) and path == "source":
        value = value.get("component")
    return "" if value is None else str(value)
