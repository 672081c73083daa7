"""Walk a GitOps repository and sort its documents into the objects we manage.

Nothing here raises for a bad manifest: each problem becomes a
``ManifestError`` on the repository and the object is left out, so one bad
file never stops the others.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegitops.ids import ResourceId
from omegitops.manifests.yamlfile import (
    Document,
    YamlError,
    load_documents,
    load_text,
    non_string_key,
)

API_VERSION = "ome.io/v1beta1"
INFERENCE_SERVICE = "InferenceService"
SERVING_RUNTIME = "ServingRuntime"
CLUSTER_SERVING_RUNTIME = "ClusterServingRuntime"
MANAGED_KINDS = (INFERENCE_SERVICE, SERVING_RUNTIME, CLUSTER_SERVING_RUNTIME)
NAMESPACED_KINDS = (INFERENCE_SERVICE, SERVING_RUNTIME)
# OME's other kinds (and omegitops' own InferenceReplica): skipped and listed.
# Any other kind under ome.io is a typo of one we manage, or of one of these.
OTHER_OME_KINDS = (
    "AcceleratorClass", "BaseModel", "BenchmarkJob", "ClusterBaseModel", "FineTunedWeight",
    "InferenceReplica",
)
# Longest object name, field path and message shown in one error line.
MAX_SHOWN = {"obj": 120, "field": 160, "message": 300}

DEFAULT_VALUES_FILE = "ome-values.yaml"
YAML_SUFFIXES = (".yaml", ".yml")
# Folders that never hold manifests: VCS metadata, local cluster state, reports.
SKIPPED_DIRS = {".git", ".github", ".omegitops", "node_modules", "__pycache__"}


@dataclass(frozen=True)
class ManifestError:
    """One problem, located as precisely as the input allows."""

    path: str
    line: int | None
    message: str
    obj: ResourceId | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        parts = [where]
        shown = self.to_dict()
        parts.extend(shown[key] for key in ("object", "field") if shown[key])
        parts.append(shown["message"])
        return ": ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The error as data, each part clipped: a hostile name is not echoed whole."""
        return {
            "path": self.path,
            "line": self.line,
            "object": _clip(str(self.obj), MAX_SHOWN["obj"]) if self.obj else None,
            "field": _clip(self.field, MAX_SHOWN["field"]) if self.field else None,
            "message": _clip(self.message, MAX_SHOWN["message"]),
        }


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Manifest:
    """A managed object with the file and node tree it was read from."""

    id: ResourceId
    path: str
    doc: Document

    @property
    def data(self) -> dict[str, Any]:
        return self.doc.data

    @property
    def line(self) -> int:
        return self.doc.line

    def line_of(self, field_path: tuple[str | int, ...]) -> int:
        return self.doc.line_of(field_path)

    def error(self, field_path: tuple[str | int, ...], message: str) -> ManifestError:
        return ManifestError(
            path=self.path,
            line=self.line_of(field_path),
            message=message,
            obj=self.id,
            field=format_path(field_path) or None,
        )


@dataclass(frozen=True)
class Skipped:
    """A document of a kind omegitops does not manage, listed for the user."""

    path: str
    line: int
    api_version: str
    kind: str
    name: str


@dataclass
class Repository:
    """Everything read from a repository, before validation."""

    root: Path
    manifests: list[Manifest] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    errors: list[ManifestError] = field(default_factory=list)
    files: int = 0


def format_path(path: tuple[str | int, ...]) -> str:
    """``('spec', 'containers', 0, 'image')`` -> ``spec.containers[0].image``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def manifest_files(root: Path, values_file: str = DEFAULT_VALUES_FILE) -> list[Path]:
    """Every YAML file under ``root`` except the operator values file, sorted."""
    found = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIPPED_DIRS for part in rel.parts[:-1]):
            continue
        if path.suffix not in YAML_SUFFIXES or not path.is_file():
            continue
        if rel.as_posix() == values_file:
            continue
        found.append(path)
    return found


def read_repository(root: Path, values_file: str = DEFAULT_VALUES_FILE) -> Repository:
    """Load and classify every manifest under ``root``."""
    root = Path(root)
    repo = Repository(root=root)
    if not root.is_dir():
        repo.errors.append(ManifestError(str(root), None, "repository folder does not exist"))
        return repo
    for path in manifest_files(root, values_file):
        repo.files += 1
        _read_file(repo, path)
    return repo


def _read_file(repo: Repository, path: Path) -> None:
    rel = path.relative_to(repo.root).as_posix()
    if path.is_symlink() and not path.resolve().is_relative_to(repo.root.resolve()):
        # A link out of the repository would read (and echo) files nobody reviewed.
        repo.errors.append(ManifestError(rel, None, "symbolic link to a file outside the "
                                                    "repository; not read"))
        return
    try:
        text = load_text(path.read_bytes())
        documents = list(load_documents(text))
    except YamlError as err:
        repo.errors.append(ManifestError(rel, err.line, err.message))
        return
    except OSError as err:
        repo.errors.append(ManifestError(rel, None, f"cannot read: {err.strerror}"))
        return
    for doc in documents:
        _classify(repo, rel, doc)


def _classify(repo: Repository, rel: str, doc: Document) -> None:
    data = doc.data
    if not isinstance(data, dict):
        found = type(data).__name__
        repo.errors.append(
            ManifestError(rel, doc.line, f"a manifest must be a mapping, found a {found}")
        )
        return
    api_version, kind = data.get("apiVersion"), data.get("kind")
    if api_version is None and kind is None:
        # Values files, kustomize configs and the like live beside manifests.
        repo.skipped.append(Skipped(rel, doc.line, "", "", "(not a Kubernetes object)"))
        return
    for key, value in (("apiVersion", api_version), ("kind", kind)):
        if not isinstance(value, str) or not value:
            problem = "missing" if value is None else f"{_a(type(value).__name__)}"
            repo.errors.append(ManifestError(
                rel, doc.line_of((key,)),
                f"document has no apiVersion and kind (strings): {key} is {problem}"))
            return
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    group = api_version.split("/")[0]
    if group == "ome.io" and kind not in MANAGED_KINDS + OTHER_OME_KINDS:
        close = difflib.get_close_matches(kind, MANAGED_KINDS + OTHER_OME_KINDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        repo.errors.append(ManifestError(
            rel, doc.line_of(("kind",)), f"unknown ome.io kind {kind!r}{hint}", field="kind"))
        return
    if kind not in MANAGED_KINDS or group != "ome.io":
        repo.skipped.append(Skipped(rel, doc.line, api_version, kind, str(name or "")))
        return
    if api_version != API_VERSION:
        repo.errors.append(
            ManifestError(rel, doc.line_of(("apiVersion",)),
                          f"{kind} apiVersion {api_version!r} is not supported, "
                          f"expected {API_VERSION!r}", field="apiVersion")
        )
        return
    if not isinstance(name, str) or not name:
        problem = "no metadata.name" if name is None or name == "" else (
            f"{_a(type(name).__name__)} as metadata.name (a string is needed)")
        repo.errors.append(ManifestError(
            rel, doc.line_of(("metadata", "name")), f"{kind} has {problem}",
            field="metadata.name"))
        return
    key = non_string_key(doc.node)
    if key is not None:
        # Kubernetes objects are JSON: every key is a string. YAML reads 1, true
        # or null as something else, which no schema or later lookup expects.
        repo.errors.append(ManifestError(
            rel, key.start_mark.line + 1,
            _clip(f"{kind} {name}: key {key.value!r} is read as {_a(_yaml_type(key))}, not a "
                  f"string; quote it", MAX_SHOWN["message"])))
        return
    namespace = ""
    if kind in NAMESPACED_KINDS:
        namespace = metadata.get("namespace") or "default"
        if not isinstance(namespace, str):
            namespace = str(namespace)
    repo.manifests.append(Manifest(ResourceId(kind, namespace, name), rel, doc))


def _yaml_type(node: Any) -> str:
    """``tag:yaml.org,2002:int`` -> ``int``."""
    return str(node.tag).rsplit(":", 1)[-1]


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"
