"""``omegitops sim`` run in-process through its own parser."""

from __future__ import annotations

import argparse
import json

from sim_helpers import make_pod

from omegitops.cluster.sim import SimCluster
from omegitops.commands import sim as sim_command


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="omegitops")
    sim_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_init_advance_fault_and_show(tmp_path, capsys):
    spec = f"sim:{tmp_path / 'c.json'}"
    assert run("sim", "init", "--cluster", spec, "--nodes", "2", "--gpus-per-node", "4") == 0
    with SimCluster(tmp_path / "c.json") as cluster:
        cluster.create_pod(make_pod("a"))
    assert run("sim", "advance", "--cluster", spec, "--seconds", "30") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2026-09-27T08:00:30Z"
    assert run("sim", "fault", "--cluster", spec, "--pod", "a", "--kind", "crash") == 0
    assert run("sim", "show", "--cluster", spec) == 0
    out = capsys.readouterr().out
    assert "CrashLoopBackOff" in out and "node-0" in out
    assert run("sim", "show", "--cluster", spec, "-o", "json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["now"] == "2026-09-27T08:00:30Z"
    assert shown["pods"][0]["status"]["containerStatuses"][0]["restartCount"] == 0
    assert run("sim", "advance", "--cluster", spec, "--next") == 0
    assert capsys.readouterr().out.strip() == "2026-09-27T08:00:40Z"


def test_a_node_down_then_removed_from_the_command_line(tmp_path, capsys):
    spec = f"sim:{tmp_path / 'c.json'}"
    assert run("sim", "init", "--cluster", spec, "--nodes", "2") == 0
    with SimCluster(tmp_path / "c.json") as cluster:
        cluster.create_pod(make_pod("a"))
    run("sim", "advance", "--cluster", spec, "--seconds", "30")
    assert run("sim", "fault", "--cluster", spec, "--pod", "a", "--kind", "node-down") == 0
    run("sim", "advance", "--cluster", spec, "--seconds", "3600")
    capsys.readouterr()
    run("sim", "show", "--cluster", spec)
    assert "Terminating" in capsys.readouterr().out  # the silent node's pod stays
    assert run("sim", "fault", "--cluster", spec, "--kind", "node-removed", "--pod", "a") == 0
    assert capsys.readouterr().out == "node node-0 removed; PodGC deletes its pods in 40 s\n"
    run("sim", "advance", "--cluster", spec, "--seconds", "40")
    assert capsys.readouterr().out.strip() == "2026-09-27T09:01:10Z"
    run("sim", "show", "--cluster", spec, "-o", "json")
    assert json.loads(capsys.readouterr().out)["pods"] == []
