"""``omegitops validate``: load, classify and validate every manifest."""

from __future__ import annotations

import argparse

from omegitops.commands.common import (
    STRUCTURED,
    add_repo_args,
    cache_dir,
    print_structured,
    table,
)
from omegitops.manifests.load import Loaded, load
from omegitops.manifests.repository import INFERENCE_SERVICE
from omegitops.render.resolve import OMENATIVE, components_of, resolve_mode


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("validate", help="validate the repository's manifests")
    add_repo_args(parser)
    parser.add_argument("-o", "--output", choices=["text", *STRUCTURED], default="text")
    parser.set_defaults(func=run)


def service_modes(loaded: Loaded) -> dict:
    """For each valid service: the deployment mode of each of its components."""
    catalog = loaded.result.catalog
    modes = {}
    for service in catalog.services:
        runtime = catalog.runtime_for(service)
        data = runtime.data if runtime else None
        modes[service.id] = {
            component: resolve_mode(service.data, data, component, loaded.operator).value
            for component in components_of(service.data, data)
        }
    return modes


def _describe(modes: dict[str, str]) -> str:
    native = [c for c, m in modes.items() if m == OMENATIVE]
    others = sorted({m for m in modes.values() if m != OMENATIVE})
    if native and not others:
        return f"OMENative ({', '.join(native)})"
    if not native:
        return f"not OMENative ({', '.join(others)}): lifecycle not managed"
    rest = [c for c, m in modes.items() if m != OMENATIVE]
    return f"OMENative ({', '.join(native)}); not managed: {', '.join(rest)}"


def run(args: argparse.Namespace) -> int:
    loaded = load(args.repo, args.operator_values, cache_dir=cache_dir(args))
    result = loaded.result
    modes = service_modes(loaded)
    valid = sorted(result.valid, key=lambda m: m.id)
    if args.output in STRUCTURED:
        print_structured({
            "repository": str(loaded.root),
            "operatorValues": loaded.values_path,
            "valid": [
                {"object": str(m.id), "kind": m.id.kind, "namespace": m.id.namespace or None,
                 "name": m.id.name, "path": m.path, "line": m.line,
                 "modes": modes.get(m.id)}
                for m in valid
            ],
            "skipped": [
                {"kind": s.kind, "apiVersion": s.api_version, "name": s.name, "path": s.path,
                 "line": s.line}
                for s in loaded.repo.skipped
            ],
            "skippedFiles": [{"path": f.path, "reason": f.reason}
                             for f in loaded.repo.skipped_files],
            "errors": [e.to_dict() for e in result.errors],
            "warnings": [e.to_dict() for e in result.warnings],
        }, args.output)
        return 0 if result.ok else 1
    services = sum(1 for m in valid if m.id.kind == INFERENCE_SERVICE)
    print(
        f"{loaded.root}: {loaded.repo.files} files, {len(valid)} valid objects "
        f"({services} InferenceServices, {len(valid) - services} runtimes), "
        f"{len(result.errors)} errors, {len(result.warnings)} warnings, "
        f"{len(loaded.repo.skipped)} skipped"
        + (f", {len(loaded.repo.skipped_files)} files not read"
           if loaded.repo.skipped_files else "")
    )
    print(f"operator values: {loaded.values_path or 'none (nothing set by the operator)'}")
    if valid:
        print("\nvalid:")
        rows = [
            (str(m.id), f"{m.path}:{m.line}", _describe(modes[m.id]) if m.id in modes else "")
            for m in valid
        ]
        print(_indent(table(("OBJECT", "FILE", "LIFECYCLE"), rows)))
    if loaded.repo.skipped:
        print("\nskipped (kinds omegitops does not manage):")
        rows = [(f"{s.kind} {s.name}".strip(), s.api_version, f"{s.path}:{s.line}")
                for s in loaded.repo.skipped]
        print(_indent(table(("OBJECT", "API VERSION", "FILE"), rows)))
    if loaded.repo.skipped_files:
        print("\nfiles not read:")
        for skipped in loaded.repo.skipped_files:
            print(f"  {skipped.path}: {skipped.reason}")
    if result.warnings:
        print("\nwarnings:")
        for warning in result.warnings:
            print(f"  {warning}")
    if result.errors:
        print("\ninvalid:")
        for error in result.errors:
            print(f"  {error}")
    if not loaded.repo.manifests and not result.errors:
        print("\nerror: the repository holds no InferenceService or runtime")
        return 1
    return 0 if result.ok else 1


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
