"""The examples each command's ``--help`` ends with, kept in one table so that the tests
can parse every one of them with the real parser (an example that no longer parses is a
test failure, not a reader's surprise)."""

from __future__ import annotations

import argparse

# The command's words (nested verbs too) -> its examples, each "command  # what it does".
EXAMPLES: dict[tuple[str, ...], list[str]] = {
    ("validate",): [
        "omegitops validate --repo examples              # every object, and what is wrong",
        "omegitops validate --repo . -o json             # the same as data",
    ],
    ("resolve",): [
        "omegitops resolve --repo examples               # each lifecycle field and its source",
        "omegitops resolve --repo . -o yaml",
    ],
    ("plan",): [
        "omegitops plan --repo examples                  # against an empty cluster sized to fit",
        "omegitops plan --repo examples --cluster sim:.omegitops/cluster.json",
        "omegitops plan --repo . --base origin/main --report-branch omegitops-status",
        "omegitops plan --repo . --base origin/main --comment-out comment.md --json-out plan.json",
    ],
    ("reconcile",): [
        "omegitops reconcile --repo examples --until-idle   # the simulated cluster, until idle",
        ("omegitops reconcile --repo https://github.com/acme/models.git --branch main "
         "--cluster kube --until-idle --max-seconds 900"),
        ("omegitops reconcile --repo . --report-dir status --report-branch omegitops-status "
         "--commit --push"),
    ],
    ("merge-reports",): [
        "omegitops merge-reports shards/0 shards/1 shards/2 --expect 3 --report-dir status",
    ],
    ("get",): [
        "omegitops get irep -A                           # every InferenceReplica",
        "omegitops get irep qwen3-0-6b-engine -n qwen3-0-6b -o yaml",
        "omegitops get irep -n qwen3-0-6b -o wide --cluster kube",
    ],
    ("instance",): [
        "omegitops instance list qwen3-0-6b -n qwen3-0-6b",
        "omegitops instance status qwen3-0-6b 0 -n qwen3-0-6b",
    ],
    ("instance", "list"): [
        "omegitops instance list qwen3-0-6b -n qwen3-0-6b",
        "omegitops instance list llama-pd -n llama-demo --component decoder -o json",
    ],
    ("instance", "status"): [
        "omegitops instance status qwen3-0-6b 0 -n qwen3-0-6b",
        "omegitops instance status qwen3-0-6b 1 -n qwen3-0-6b --cluster kube -o yaml",
    ],
    ("rollout",): [
        "omegitops rollout pause qwen3-0-6b -n qwen3-0-6b --by alice",
        "omegitops rollout status qwen3-0-6b -n qwen3-0-6b --watch=false",
    ],
    ("rollout", "pause"): [
        "omegitops rollout pause qwen3-0-6b -n qwen3-0-6b --by alice",
    ],
    ("rollout", "resume"): [
        "omegitops rollout resume qwen3-0-6b -n qwen3-0-6b",
    ],
    ("rollout", "promote"): [
        "omegitops rollout promote qwen3-0-6b -n qwen3-0-6b --by alice   # the next canary step",
    ],
    ("rollout", "status"): [
        "omegitops rollout status qwen3-0-6b -n qwen3-0-6b              # waits for the end",
        "omegitops rollout status qwen3-0-6b -n qwen3-0-6b --watch=false -o json",
        "omegitops rollout status qwen3-0-6b -n qwen3-0-6b --timeout 10m --cluster kube",
    ],
    ("events",): [
        "omegitops events -n qwen3-0-6b",
        "omegitops events --reason InstanceFailed -o yaml",
    ],
    ("sim",): [
        "omegitops sim init --nodes 4 --force",
        "omegitops sim show",
    ],
    ("sim", "init"): [
        "omegitops sim init --nodes 4 --gpus-per-node 8 --force",
    ],
    ("sim", "advance"): [
        "omegitops sim advance --next                    # to the next thing that happens",
        "omegitops sim advance --seconds 300",
    ],
    ("sim", "fault"): [
        "omegitops sim show                              # the pods' names",
        "omegitops sim fault --kind crash --pod qwen3-0-6b-engine-0-default-0 -n qwen3-0-6b",
        "omegitops sim fault --kind node-down --node node-3",
        "omegitops sim fault --kind node-down --node node-3 --clear",
    ],
    ("sim", "show"): [
        "omegitops sim show",
        "omegitops sim show -o yaml --cluster sim:/tmp/cluster.json",
    ],
}


def epilog(lines: list[str]) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def attach(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> None:
    """Each command's examples at the end of its ``--help``, laid out as written."""
    if path in EXAMPLES and parser.epilog is None:
        parser.epilog = epilog(EXAMPLES[path])
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                attach(child, (*path, name))
