"""Walk a GitOps repository and sort its documents into the objects we manage.

Nothing here raises for a bad manifest: each problem becomes a
``ManifestError`` on the repository and the object is left out, so one bad
file never stops the others.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

from omegitops.manifests.jsonvalues import normalize_json
from omegitops.manifests.memo import LoadMemo, content_key
from omegitops.manifests.prescan import file_namespaces
from omegitops.manifests.yamlfile import (
    AliasBudget,
    Document,
    YamlError,
    list_items,
    load_documents,
    load_text,
    node_at,
    read_limited,
    yaml_type,
)
from omegitops.model.ids import ResourceId
from omegitops.util.files import shown_path

OME_GROUP = "ome.io"
API_VERSION = f"{OME_GROUP}/v1beta1"
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
JSON_SUFFIX = ".json"
# Folders that never hold manifests: VCS metadata, local cluster state, reports.
SKIPPED_DIRS = {".git", ".github", ".omegitops", "node_modules", "__pycache__"}
# Folders deeper than this are not read (an error names the folder).
MAX_FOLDER_DEPTH = 100


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
    # (the file's content key, its place among the file's objects): what the load memo
    # knows it by; None for a file read apart from the memo.
    source: tuple[str, int] | None = None

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


@dataclass(frozen=True)
class SkippedFile:
    """A file that looks like a manifest but is not read (a .json file, a broken link)."""

    path: str
    reason: str


@dataclass
class Repository:
    """Everything read from a repository, before validation."""

    root: Path
    manifests: list[Manifest] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    skipped_files: list[SkippedFile] = field(default_factory=list)
    errors: list[ManifestError] = field(default_factory=list)
    files: int = 0
    # Files a --shard left unread: every object in them is in another shard's namespaces.
    other_shards_files: int = 0

    def release_nodes(self) -> None:
        """Drop every manifest's node tree, once validation has placed its errors."""
        for manifest in self.manifests:
            manifest.doc.release()


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
    return walk(root, values_file)[0]


def walk(root: Path, values_file: str = DEFAULT_VALUES_FILE
         ) -> tuple[list[Path], list[SkippedFile], list[ManifestError]]:
    """The YAML files ``manifest_files`` lists; the files that look like manifests but
    are not read, with why; and the folders the walk cannot read or will not follow,
    each an error (a folder nobody can read, a link to a folder, a git submodule that
    is not checked out), since manifests may be in them and --prune must not take their
    services for gone."""
    found, skipped, unread = [], [], []

    def cannot_read(err: OSError) -> None:
        where = Path(err.filename) if err.filename else root
        rel = shown_path(where.relative_to(root).as_posix()) if where != root else "."
        unread.append(ManifestError(rel, None, f"folder cannot be read "
                                                f"({err.strerror or err}); not read"))

    for folder, dirs, files in _walk_folders(root, cannot_read):
        here = Path(folder)
        if len(here.relative_to(root).parts) >= MAX_FOLDER_DEPTH and dirs:
            # Not entered: a walk (and every path) that deep has no end a manifest needs.
            rel = shown_path(here.relative_to(root).as_posix())
            unread.append(ManifestError(rel, None, (
                f"folder nested {MAX_FOLDER_DEPTH} levels deep holds more folders; "
                f"folders deeper than {MAX_FOLDER_DEPTH} levels are not read")))
            dirs[:] = []
        kept = []
        for name in sorted(dirs):
            if name in SKIPPED_DIRS:
                continue
            if (here / name).is_symlink():
                rel = shown_path((here / name).relative_to(root).as_posix())
                unread.append(ManifestError(rel, None, (
                    f"symbolic link to a folder ({_clip(os.readlink(here / name), 100)}); "
                    "not followed")))
                continue
            kept.append(name)
        dirs[:] = kept
        for name in sorted(files):
            path = here / name
            relative = path.relative_to(root)
            if path.suffix not in YAML_SUFFIXES + (JSON_SUFFIX,) or \
                    relative.as_posix() == values_file:
                continue
            reason = _unread_reason(path)
            if reason:
                skipped.append(SkippedFile(shown_path(relative.as_posix()), reason))
            elif path.suffix in YAML_SUFFIXES:
                found.append(path)
    unread += _submodules_not_checked_out(root)
    return sorted(found), sorted(skipped, key=lambda s: s.path), unread


def _walk_folders(root: Path, onerror: Callable[[OSError], None]
                  ) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root, onerror=onerror)``, top down, without following links, and
    without recursion: Python 3.11's ``os.walk`` recurses once per level, so a folder
    nested 1,500 levels deep raised RecursionError. The caller may trim ``dirs``."""
    stack = [os.fspath(root)]
    while stack:
        top = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        try:
            with os.scandir(top) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
        except OSError as err:
            onerror(err)
            continue
        yield top, dirs, files
        for name in reversed(dirs):
            path = os.path.join(top, name)
            if not os.path.islink(path):
                stack.append(path)


def _submodules_not_checked_out(root: Path) -> list[ManifestError]:
    """Submodules ``.gitmodules`` names whose folder holds nothing: a clone that did not
    recurse into them, or a checkout that never ran ``git submodule update``."""
    gitmodules = root / ".gitmodules"
    if not gitmodules.is_file():
        return []
    missing = []
    for line in gitmodules.read_text(encoding="utf-8", errors="replace").splitlines():
        key, _, value = line.strip().partition("=")
        if key.strip() != "path":
            continue
        folder = root / value.strip()
        if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
            missing.append(ManifestError(shown_path(value.strip()), None, (
                "git submodule not checked out: its manifests are not read (clone with "
                "--recurse-submodules, or move them into the repository)")))
    return missing


def _unread_reason(path: Path) -> str | None:
    """Why a .yaml, .yml or .json entry is not read, or None when it is."""
    if path.is_symlink():
        try:
            path.resolve(strict=True)
        except FileNotFoundError:
            return f"symbolic link to {_clip(os.readlink(path), 100)}, which does not exist"
        except (OSError, RuntimeError):  # RuntimeError: Python 3.11's "Symlink loop"
            return "symbolic link that loops back on itself"
    if path.suffix == JSON_SUFFIX and not path.is_dir():
        return "a .json file: manifests are read from .yaml and .yml files only"
    return None


def read_repository(root: Path, values_file: str = DEFAULT_VALUES_FILE,
                    owns: Callable[[str], bool] | None = None,
                    memo: LoadMemo | None = None) -> Repository:
    """Load and classify every manifest under ``root``. With ``owns`` (a ``--shard``'s
    namespaces), a file whose objects are all in other namespaces is left unread,
    when the pre-scan (``prescan.py``) can tell that much from its documents' heads.
    ``memo`` gives the documents of files read cleanly before (``memo.py``)."""
    root = Path(root)
    repo = Repository(root=root)
    if not root.is_dir():
        repo.errors.append(ManifestError(str(root), None, "repository folder does not exist"))
        return repo
    files, repo.skipped_files, unread = walk(root, values_file)
    repo.errors.extend(unread)
    within = Within(root)
    aliases = AliasBudget.per_repository()
    for path in files:
        _read_file(repo, path, owns, within, memo, aliases)
    return repo


def outside(path: Path, root: Path) -> bool:
    """Whether ``path``, inside ``root`` as written, leads out of it through a link
    (its own, or a folder's on the way)."""
    return Within(root).outside(path)


class Within:
    """``outside`` for many files under one root: each folder is resolved once (a
    thousand files' full resolutions were a tenth of a pass), and a file itself only
    when it is a link."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._folders: dict[Path, Path] = {}

    def outside(self, path: Path) -> bool:
        folder = self._folders.get(path.parent)
        if folder is None:
            folder = self._folders[path.parent] = path.parent.resolve()
        target = path.resolve() if path.is_symlink() else folder / path.name
        return not target.is_relative_to(self.root)


# The first line of a Git LFS pointer file (git-lfs' spec): what a clone without LFS
# holds in place of the file.
LFS_POINTER = "version https://git-lfs.github.com/spec/v1"


def _read_file(repo: Repository, path: Path, owns: Callable[[str], bool] | None,
               within: Within, memo: LoadMemo | None = None,
               aliases: AliasBudget | None = None) -> None:
    rel = shown_path(path.relative_to(repo.root).as_posix())
    repo.files += 1
    if within.outside(path):
        # A link out of the repository would read (and echo) files nobody reviewed.
        repo.errors.append(ManifestError(rel, None, "symbolic link to a file outside the "
                                                    "repository; not read"))
        return
    try:
        raw = read_limited(path)
        text = load_text(raw)
        if text.startswith(LFS_POINTER):
            repo.errors.append(ManifestError(rel, 1, (
                "a Git LFS pointer, not the manifest itself: the clone has no LFS objects "
                "(run git lfs pull, or keep manifests out of LFS); not read")))
            return
        if owns is not None:
            namespaces = file_namespaces(text, NAMESPACED_KINDS)
            if namespaces is not None and not any(owns(n) for n in namespaces):
                repo.files -= 1  # not this shard's: counted apart
                repo.other_shards_files += 1
                return
        key = content_key(raw) if memo is not None else None
        remembered = memo.documents(cast(str, key)) if memo is not None else None
        if remembered is not None:
            _classify_remembered(repo, rel, text, cast(str, key), remembered)
            return
        left = aliases.aliases if aliases is not None else None
        documents = list(load_documents(text, aliases))
    except YamlError as err:
        repo.errors.append(ManifestError(rel, err.line, err.message))
        return
    except OSError as err:
        repo.errors.append(ManifestError(rel, None, f"cannot read: {err.strerror}"))
        return
    errors, manifests = len(repo.errors), len(repo.manifests)
    # A file with aliases is read again each run, so that the repository's bound on
    # them counts it every time, from the memo or not.
    clean = aliases is None or aliases.aliases == left
    for doc in documents:
        items = list_items(doc)
        clean = clean and items is None and doc.non_string_key is None
        for item in items or [doc]:
            _classify(repo, rel, item)
    if memo is None or key is None:
        return
    _mark_sources(repo, manifests, key)
    if clean and len(repo.errors) == errors:
        # Read cleanly: the next run takes its documents (normalised) from the memo.
        memo.remember_documents(key, [(doc.index, doc.line, doc.data) for doc in documents])


def _classify_remembered(repo: Repository, rel: str, text: str, key: str,
                         remembered: list[tuple[int, int, Any]]) -> None:
    """Classify a file's documents as the memo gives them: each read cleanly (its keys
    strings, its values JSON's, made so by ``normalize_json`` before it was kept)."""
    manifests = len(repo.manifests)
    for index, line, data in remembered:
        doc = Document(index, data, None, first_line=line,
                       compose=partial(node_at, text, index))
        _classify(repo, rel, doc, normalized=True)
    _mark_sources(repo, manifests, key)


def _mark_sources(repo: Repository, first: int, key: str) -> None:
    """Give the manifests one file added (from ``first`` on) their memo key: the file's
    content key and their place among its manifests."""
    for place, manifest in enumerate(repo.manifests[first:]):
        manifest.source = (key, place)


def _classify(repo: Repository, rel: str, doc: Document, normalized: bool = False) -> None:
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
    api_version, kind = cast(str, api_version), cast(str, kind)  # strings, as checked above
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    group = api_version.split("/")[0]
    if group == OME_GROUP and kind not in MANAGED_KINDS + OTHER_OME_KINDS:
        close = difflib.get_close_matches(kind, MANAGED_KINDS + OTHER_OME_KINDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        repo.errors.append(ManifestError(
            rel, doc.line_of(("kind",)), f"unknown ome.io kind {kind!r}{hint}", field="kind"))
        return
    if group != OME_GROUP and (kind in MANAGED_KINDS or group.lower() == OME_GROUP):
        # An object of ours under a mistyped group (``ome.oi``, ``OME.io``) is not some
        # other tool's object to skip: skipped, it would read as deleted, and --prune
        # would tear the running service down. API groups are lower case, so a group
        # that differs from ome.io only in case is a typo whatever its kind.
        repo.errors.append(ManifestError(
            rel, doc.line_of(("apiVersion",)),
            _clip(f"{kind} with apiVersion {api_version!r} is not read: its apiVersion "
                  f"must be {API_VERSION!r}{_group_hint(group)}", MAX_SHOWN["message"]), field="apiVersion"))
        return
    if kind not in MANAGED_KINDS or group != OME_GROUP:
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
    bad_key = doc.non_string_key
    if bad_key is not None:
        # Kubernetes objects are JSON: every key is a string. YAML reads 1, true
        # or null as something else, which no schema or later lookup expects.
        repo.errors.append(ManifestError(
            rel, bad_key.start_mark.line + 1,
            _clip(f"{kind} {name}: key {bad_key.value!r} is read as {_a(yaml_type(bad_key))}, not a "
                  f"string; quote it", MAX_SHOWN["message"])))
        return
    problems = [] if normalized or doc.json_only else normalize_json(data)
    if problems:
        # PyYAML builds a date or bytes from an unquoted 2024-01-01 or a !!binary, but
        # no Kubernetes object can hold one: the API only speaks JSON.
        path, what = min(problems, key=lambda p: doc.line_of(p[0]))
        repo.errors.append(ManifestError(
            rel, doc.line_of(path),
            _clip(f"{kind} {name}: {format_path(path)}: {_shown(dig_value(data, path))} is "
                  f"read as {what}, which a Kubernetes object cannot hold (it is JSON); "
                  "quote it to keep it as text", MAX_SHOWN["message"])))
        return
    namespace = ""
    if kind in NAMESPACED_KINDS:
        namespace = cast(dict, metadata).get("namespace") or "default"
        if not isinstance(namespace, str):
            namespace = str(namespace)
    repo.manifests.append(Manifest(ResourceId(kind, namespace, name), rel, doc))


def _group_hint(group: str) -> str:
    """`` (is 'ome.oi' a typo of 'ome.io'?)`` for a group a typo away from it."""
    close = group.lower() == OME_GROUP or difflib.get_close_matches(
        group.lower(), [OME_GROUP], n=1, cutoff=0.6)
    return f" (is {group!r} a typo of {OME_GROUP!r}?)" if close else ""


def _shown(value: Any) -> str:
    """A value as the file wrote it, near enough: ``2024-01-01``, ``b'...'``."""
    if isinstance(value, bytes):
        return "a !!binary value"  # its bytes are anything at all: not echoed
    text = value.isoformat() if hasattr(value, "isoformat") else repr(value)
    return _clip(text, 60)


def dig_value(data: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


def _a(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"
