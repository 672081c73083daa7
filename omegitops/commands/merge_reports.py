"""``omegitops merge-reports``: the status reports of ``reconcile --shard I/N`` runs as one.

A sharded run (the Argo WorkflowTemplate ``pipelines/argo/workflowtemplate-
sharded.yaml``) reconciles each shard in its own pod, each writing its report
into a folder of its own; this last step reads them all, checks that they cover
N different shards of one commit, and writes, commits and pushes the fleet's
report once, as an unsharded run does.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from omegitops.commands.common import branch_name, report_folder
from omegitops.gitops import DEFAULT_AUTHOR, Author, checkout
from omegitops.gitops.branch import check_report_branch, publish_report
from omegitops.gitops.repo import report_path
from omegitops.report.status import JSON_FILE, merge_reports, write_built_report
from omegitops.util.errors import InputError, UsageError
from omegitops.util.files import temporary_folder

DEFAULT_REPORT_DIR = "status"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("merge-reports",
                                   help="merge the status reports of reconcile --shard runs")
    parser.add_argument("shards", nargs="+", metavar="SHARD_DIR",
                        help="a folder holding one shard's status.json, or a folder of "
                             "such folders")
    parser.add_argument("--expect", type=int, default=None, metavar="N",
                        help="refuse to merge unless there are N shard reports")
    parser.add_argument("--report-dir", default=None, metavar="D", type=report_folder,
                        help="where the merged report goes; with --commit, relative to the "
                             f"repository root (default: {DEFAULT_REPORT_DIR})")
    parser.add_argument("--repo", default=".",
                        help="repository folder or git URL to commit into (with --commit)")
    parser.add_argument("--branch", default=None)
    parser.add_argument("--commit", action="store_true",
                        help="commit the merged report when its content changed")
    parser.add_argument("--push", action="store_true", help="push the commit (needs --commit)")
    parser.add_argument("--report-branch", default=None, metavar="B", type=branch_name,
                        help="with --commit, commit the report onto branch B (made when "
                             "missing) instead of the manifests' branch")
    parser.add_argument("--author", default=DEFAULT_AUTHOR, metavar='"NAME <EMAIL>"')
    parser.set_defaults(func=run)


def shard_folders(given: list[str]) -> list[Path]:
    """The folders holding a shard's report: each given one, or, for a folder without a
    report of its own, its subfolders that have one (as Argo hands over the shards'
    artifacts under one key)."""
    found: list[Path] = []
    for folder in map(Path, given):
        if (folder / JSON_FILE).is_file() or not folder.is_dir():
            found.append(folder)
        else:
            found += sorted(p for p in folder.iterdir() if (p / JSON_FILE).is_file())
    return found


def read_shard(folder: Path) -> dict:
    path = folder / JSON_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise InputError(f"{path}: no shard report there (did that shard's run write "
                         "--report-dir?); nothing was merged") from err
    except ValueError as err:
        raise InputError(f"{path}: not a status report: {err}; nothing was merged") from err


def run(args: argparse.Namespace) -> int:
    if args.push and not args.commit:
        raise UsageError("--push needs --commit")
    if args.report_branch is not None and not args.commit:
        raise UsageError("--report-branch needs --commit")
    author = Author.parse(args.author)
    folders = shard_folders(args.shards)
    if args.expect is not None and len(folders) != args.expect:
        raise InputError(f"{len(folders)} shard reports found, {args.expect} expected "
                         f"({', '.join(map(str, folders)) or 'none'}); nothing was merged")
    try:
        merged = merge_reports([read_shard(folder) for folder in folders])
    except ValueError as err:
        raise InputError(f"{err}; nothing was merged") from err
    if not args.commit:
        write_built_report(args.report_dir or DEFAULT_REPORT_DIR, merged)
        print(merged["summary"]["text"])
        return 0
    folder = report_path(args.report_dir or DEFAULT_REPORT_DIR)
    with checkout(args.repo, args.branch, None, writable=True) as repo, \
            temporary_folder("omegitops-") as aside:
        # On a report branch the manifests' tree is only read: the report is built aside.
        if args.report_branch is not None:
            check_report_branch(repo, args.report_branch)
        top = Path(aside) if args.report_branch else repo.root
        write_built_report(top / folder, merged)
        publish_report(repo, folder, top / folder, author, args.push, args.report_branch)
    print(merged["summary"]["text"])
    return 0
