"""Steps 1-3 of a run: read the operator settings, the manifests, validate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omegitops.manifests.memo import LoadMemo, memo_for
from omegitops.manifests.operator_values import read_operator_values
from omegitops.manifests.repository import (
    DEFAULT_VALUES_FILE,
    Manifest,
    Repository,
    read_repository,
)
from omegitops.manifests.validate import ValidationResult, validate_repository
from omegitops.render.operator import OperatorSettings
from omegitops.render.resolve import ComponentLifecycle, components_of, dig, resolve_component
from omegitops.util.copying import Packed
from omegitops.util.gcpause import without_gc_pauses


@dataclass
class Loaded:
    root: Path
    operator: OperatorSettings
    values_path: str | None
    repo: Repository
    result: ValidationResult


@without_gc_pauses
def load(root: Path | str, values_file: str | None = None,
         owns: Callable[[str], bool] | None = None,
         cache_dir: Path | None = None, memo: LoadMemo | None = None) -> Loaded:
    """Load and validate a repository; OperatorConfigError stops everything first.
    ``owns`` keeps the services of those namespaces only (``--shard``): a file whose
    objects are all in other namespaces is not read (when the pre-scan can tell), and
    only those services are validated and resolved. What was found for inputs seen
    before is taken from the load memo of ``cache_dir`` (``memo.py``; None: no memo),
    and what is new is added to it. A ``memo`` given instead (a carried one,
    ``carried.py``) is the caller's: saved to its folder if it has one, and kept whole
    for what the caller carries on."""
    root = Path(root)
    operator, values_path = read_operator_values(root, values_file)
    skip = values_file if values_file and not Path(values_file).is_absolute() \
        else DEFAULT_VALUES_FILE
    given = memo is not None
    if memo is None and cache_dir is not None:
        memo = memo_for(cache_dir)
    repo = read_repository(root, skip, owns, memo)
    result = validate_repository(repo, operator, owns, memo)
    if memo is not None:
        memo.save()
        if not given:
            memo.release()
    # Every error is placed: the node trees (a tenth of a big pass's memory) can go.
    repo.release_nodes()
    return Loaded(root, operator, values_path, repo, result)


@dataclass(frozen=True)
class ServiceComponent:
    """A resolved component with the objects it came from."""

    service: Manifest
    runtime: Manifest | None
    lifecycle: ComponentLifecycle
    # The settings it was resolved with, to resolve it again from a pinned runtime.
    operator: OperatorSettings | None = None
    # Its pod templates rendered from the live runtime, when validation rendered them:
    # packed (a tenth of their size; a run holds them for every component), and
    # unpacked, a copy of its own, by each plan.
    rendered: Packed | None = None
    # Their revision hash, computed with them.
    revision_hash: str | None = None

    @property
    def templates(self) -> dict | None:
        return self.rendered.unpack() if self.rendered is not None else None

    @property
    def pinned(self) -> bool:
        return dig(self.service.data, ("spec", "runtime", "autoSync")) is False


@without_gc_pauses
def resolved_components(loaded: Loaded) -> list[ServiceComponent]:
    """Every component of every valid service, resolved, in a stable order."""
    out = []
    catalog = loaded.result.catalog
    for service in sorted(catalog.services, key=lambda m: m.id):
        runtime = catalog.runtime_for(service)
        runtime_data = runtime.data if runtime else None
        for component in components_of(service.data, runtime_data):
            known = loaded.result.resolved.get((service.id, component))
            if known is not None:
                out.append(ServiceComponent(service, runtime, known.lifecycle, loaded.operator,
                                            known.templates, known.revision_hash))
            else:  # not OMENative: validation neither resolves nor renders it
                out.append(ServiceComponent(service, runtime, resolve_component(
                    service.data, runtime_data, component, loaded.operator), loaded.operator))
    return out
