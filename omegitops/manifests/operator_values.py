"""Reading the operator's Helm values file (``ome-values.yaml`` by default)."""

from __future__ import annotations

import re
from pathlib import Path

from omegitops.errors import OperatorConfigError
from omegitops.lifecycle.operator import OperatorSettings, parse_operator_values
from omegitops.manifests.repository import DEFAULT_VALUES_FILE, format_path
from omegitops.manifests.schemas import validator
from omegitops.manifests.yamlfile import Document, YamlError, load_documents, load_text

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
    path = Path(values_file) if explicit else Path(root) / DEFAULT_VALUES_FILE
    if not path.is_absolute() and explicit and not path.exists():
        path = Path(root) / values_file
    if not path.exists():
        if explicit:
            raise OperatorConfigError(f"{values_file}: operator values file not found")
        return OperatorSettings(), None
    shown = _shown(path, root)
    doc = _load(path, shown)
    data = doc.data if doc else None
    if data is not None:
        errors = sorted(validator("OperatorValues").iter_errors(data), key=lambda e: e.path)
        if errors:
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
        line = doc.line_of(("ome", "controller", *match.group(1).split("."))) if (
            match and doc) else None
        raise OperatorConfigError(f"{shown}:{line}: {err}" if line else f"{shown}: {err}") \
            from None


def _shown(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


def _load(path: Path, shown: str) -> Document | None:
    try:
        documents = list(load_documents(load_text(path.read_bytes())))
    except YamlError as err:
        where = f"{shown}:{err.line}" if err.line else shown
        raise OperatorConfigError(f"{where}: {err.message}") from None
    if len(documents) > 1:
        raise OperatorConfigError(f"{shown}: a values file holds one YAML document, "
                                  f"found {len(documents)}")
    return documents[0] if documents else None
