"""Reading the operator's Helm values file (``ome-values.yaml`` by default)."""

from __future__ import annotations

import re
from pathlib import Path

from omegitops.manifests.repository import DEFAULT_VALUES_FILE, format_path, outside
from omegitops.manifests.schemas import is_valid, validator
from omegitops.manifests.yamlfile import (
    Document,
    YamlError,
    load_documents,
    load_text,
    read_limited,
)
from omegitops.render.operator import OperatorSettings, parse_operator_values
from omegitops.util.errors import OperatorConfigError

# parse_operator_values names the setting first: "invalid deploy config, <name> ..."
_SETTING = re.compile(r"^invalid deploy config, ([A-Za-z0-9_.]+)")


def read_operator_values(
    root: Path, values_file: str | None = None
) -> tuple[OperatorSettings, str | None]:
    """The operator settings and the file they came from (None when there is none).

    The default file may be absent (nothing is set then); a file named on
    the command line must exist. Any problem raises OperatorConfigError,
    which stops the run before anything is touched.
    """
    explicit = values_file is not None
    path = Path(values_file) if values_file is not None else Path(root) / DEFAULT_VALUES_FILE
    if not path.is_absolute() and values_file is not None and not path.exists():
        path = Path(root) / values_file
    if not path.exists():
        if path.is_symlink():
            raise OperatorConfigError(f"{_shown(path, root)}: symbolic link to a file that "
                                      "does not exist")
        if explicit:
            raise OperatorConfigError(f"{values_file}: operator values file not found")
        return OperatorSettings(), None
    shown = _shown(path, root)
    if _leaves(path, root):
        # Its content would be echoed in errors, and from there into a pull request's
        # comment: a link in the repository is no way to read a file nobody reviewed.
        raise OperatorConfigError(f"{shown}: symbolic link to a file outside the "
                                  "repository; not read")
    doc = _load(path, shown)
    # A key left with nothing under it (every setting commented out) is null, which Helm
    # reads as "the chart's default": unset, not a value of the wrong type.
    data = _without_nulls(doc.data) if doc else None
    if data is not None and not is_valid("OperatorValues")(data):
        errors = sorted(validator("OperatorValues").iter_errors(data), key=lambda e: e.path)
        if errors:
            assert doc is not None  # the data came from it
            err = errors[0]
            field_path = tuple(err.absolute_path)
            line = doc.line_of(field_path)
            name = format_path(field_path) or "(top level)"
            message = err.message if len(err.message) <= 200 else err.message[:197] + "..."
            raise OperatorConfigError(f"{shown}:{line}: {name}: {message}")
    try:
        return parse_operator_values(data), shown
    except OperatorConfigError as err:
        match = _SETTING.match(str(err))
        at = doc.line_of(("ome", "controller", *match.group(1).split("."))) if (
            match and doc) else None
        raise OperatorConfigError(f"{shown}:{at}: {err}" if at else f"{shown}: {err}") \
            from None


def _without_nulls(data):
    if isinstance(data, dict):
        return {key: _without_nulls(value) for key, value in data.items() if value is not None}
    return data


def _shown(path: Path, root: Path) -> str:
    """The path as the repository names it (never where a link leads)."""
    for candidate, base in ((path.absolute(), Path(root).absolute()),
                            (path.parent.resolve() / path.name, Path(root).resolve())):
        if candidate.is_relative_to(base):
            return candidate.relative_to(base).as_posix()
    return str(path)


def _leaves(path: Path, root: Path) -> bool:
    """Whether a values file inside the repository leads out of it through a link. One
    named outside the repository (a mounted Secret, say) is the operator's own choice."""
    if not path.absolute().is_relative_to(Path(root).absolute()):
        return False
    return outside(path, Path(root))


def _load(path: Path, shown: str) -> Document | None:
    try:
        documents = list(load_documents(load_text(read_limited(path))))
    except YamlError as err:
        where = f"{shown}:{err.line}" if err.line else shown
        raise OperatorConfigError(f"{where}: {err.message}") from None
    except OSError as err:
        raise OperatorConfigError(f"{shown}: cannot read: {err.strerror}") from None
    if len(documents) > 1:
        raise OperatorConfigError(f"{shown}: a values file holds one YAML document, "
                                  f"found {len(documents)}")
    return documents[0] if documents else None
