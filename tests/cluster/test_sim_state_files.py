"""A simulated cluster's files edited or replaced by hand: the state file refused in
one line naming what is wrong, the lock file never written through a link, and
neither ever ending in a traceback."""

from __future__ import annotations

import fcntl
import json
import os

import pytest
from sim_helpers import make_pod

from omegitops.cluster.sim import SimCluster


@pytest.fixture
def state(tmp_path):
    """A cluster file holding one running pod; returns its path."""
    path = tmp_path / "c.json"
    SimCluster.init(path, nodes=1, cpu_nodes=0)
    with SimCluster(path) as cluster:
        cluster.create_pod(make_pod("a"))
        cluster.advance(60)
    return path


def edit(path, change) -> bytes:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path.read_bytes()


def pod_record(data: dict) -> dict:
    return next(iter(data["sim"]["pods"].values()))


def node_record(data: dict) -> dict:
    return next(iter(data["sim"]["nodes"].values()))


def only_pod(data: dict) -> dict:
    return next(iter(data["objects"]["Pod"].values()))


EDITS = {
    "a counter that is no number": (lambda d: d["counters"].update(uid="x"),
                                    "'counters.uid' is \"x\", not int"),
    "a setting left out": (lambda d: d["settings"].pop("pullSeconds"),
                           "'settings.pullSeconds' is missing"),
    "a pod record that is a number": (lambda d: d["sim"]["pods"].update(
        {next(iter(d["sim"]["pods"])): 1}), "is not an object"),
    "a pod record without its node": (lambda d: pod_record(d).pop("node"), ".node' is missing"),
    "a container phase that is a list": (
        lambda d: pod_record(d)["containers"][0].update(phase=[]),
        ".containers[0].phase' is [], not str"),
    "a node record that is a string": (lambda d: d["sim"]["nodes"].update({"node-0": "x"}),
                                       "'sim.nodes.node-0' is not an object"),
    "a node's images that are a list": (lambda d: node_record(d).update(images=[]),
                                        "'sim.nodes.node-0.images' is [], not dict"),
    "pod faults that are a list": (lambda d: d["sim"]["faults"].update(pods=[]),
                                   "'sim.faults.pods' is [], not dict"),
    "a Pod without its uid": (lambda d: only_pod(d)["metadata"].pop("uid"),
                              "has no metadata.uid"),
    "labels that are a string": (lambda d: only_pod(d)["metadata"].update(labels="app"),
                                 ".metadata.labels' is \"app\", not dict"),
    "a record of no pod": (lambda d: d["sim"]["pods"].update({"ghost": pod_record(d)}),
                           "'sim.pods.ghost' is the record of no Pod"),
    "a true that stands for a number": (lambda d: d["settings"].update(pullSeconds=True),
                                        "'settings.pullSeconds' is true, not int or float"),
    # It used to end in a TypeError from isinstance: its type was written (bool, None).
    "a scheduler flag that is null": (lambda d: d["sim"].update(schedulerDirty=None),
                                      "'sim.schedulerDirty' is null, not bool"),
    "a restart count that is a float": (
        lambda d: pod_record(d)["containers"][0].update(restarts=1.0),
        ".containers[0].restarts' is 1.0, not int"),
}


@pytest.mark.parametrize("name", EDITS)
@pytest.mark.parametrize("verb", [["show"], ["advance", "--seconds", "10"]])
def test_a_hand_edited_state_is_refused_in_one_line_and_kept(cli, state, name, verb):
    change, why = EDITS[name]
    before = edit(state, change)
    code, _, err = cli("sim", verb[0], "--cluster", f"sim:{state}", *verb[1:])
    assert code == 1
    assert err.startswith(f"omegitops: error: {state}: not a valid simulated cluster state (")
    assert why in err
    assert len(err.splitlines()) == 1
    assert state.read_bytes() == before


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(cli, state):
    lock = state.with_name("c.json.lock")
    target = state.with_name("precious")
    target.write_text("keep me\n")
    lock.unlink()
    lock.symlink_to(target)
    code, _, err = cli("sim", "show", "--cluster", f"sim:{state}")
    assert code == 1
    assert err == (f"omegitops: error: {lock}: the simulated cluster's lock file is a symbolic "
                   "link; refusing to write through it (remove it)\n")
    assert target.read_text() == "keep me\n"


def test_a_lock_file_that_is_a_folder_or_a_pipe_is_refused(cli, state):
    lock = state.with_name("c.json.lock")
    lock.unlink()
    lock.mkdir()
    code, _, err = cli("sim", "show", "--cluster", f"sim:{state}")
    assert code == 1
    assert err == (f"omegitops: error: cannot lock the simulated cluster: {lock}: Is a "
                   "directory; nothing was done\n")
    lock.rmdir()
    os.mkfifo(lock)
    code, _, err = cli("sim", "show", "--cluster", f"sim:{state}")
    assert code == 1
    assert "lock file is not a regular file" in err


def test_a_lock_file_of_binary_junk_is_taken_over(cli, state):
    lock = state.with_name("c.json.lock")
    lock.write_bytes(os.urandom(4096) + b"\xff\xfe")
    code, _, _ = cli("sim", "show", "--cluster", f"sim:{state}")
    assert code == 0
    assert lock.read_text() == f"{os.getpid()}\n"


def test_a_held_lock_of_a_huge_binary_file_names_no_pid(cli, state):
    lock = state.with_name("c.json.lock")
    lock.write_bytes(b"\xff" * (8 << 20))
    with open(lock, "rb+") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        code, _, err = cli("sim", "show", "--cluster", f"sim:{state}")
    assert code == 1
    assert err == (f"omegitops: error: {lock}: the simulated cluster is in use by another "
                   "process (pid unknown)\n")
