"""update-strategies.txt "Pause and resume a rollout: stop rollout work and continue it
later"; min-ready-seconds.txt: "hold a rollout in progress ... and continue it with
resume"; instances.txt: rollout pauses "act on whole Instances".

A rollout is paused on the cluster (``omegitops rollout pause``, the InferenceReplica's
``ome.io/rollout-paused`` annotation) or in Git (``lifecycle.paused: true``). While
paused no update starts, an Instance already moving finishes its operation, repairs
and scaling go on, and the rollout hold names the gate ``Paused``, who paused it and
since when (docs/behaviour.md "Pause and resume a rollout"). Tests taking ``backend``
run on both backends (tests/backends.py); those taking ``tmp_path`` on ``sim:`` only.
"""

from __future__ import annotations

import json

from omegitops.commands import rollout
from omegitops.lifecycle.pause import PAUSE_ANNOTATION
from omegitops.manifests.load import load
from omegitops.report.status import build_report, validate_report
from tests.backends import NAME, rows, settled
from tests.fleet import strategy, write_service
from tests.scenario import converged

SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)
RECREATE = {"restartPolicy": "RecreateInstanceOnPodRestart"}
PAUSED = {**SURGE, "paused": True}



def _pause(s, by: str = "oncall@example.com") -> str:
    with s.cluster() as cluster:
        return rollout.pause(cluster, s.namespace, "svc", "engine", by)


def _resume(s) -> str:
    with s.cluster() as cluster:
        return rollout.resume(cluster, s.namespace, "svc", "engine")


def _updating(s) -> set[int]:
    """Instances holding an Update operation."""
    return {i for i, row in rows(s).items()
            if (row.get("operation") or {}).get("type") == "Update"}


def _hold(s) -> dict:
    return s.status(NAME).get("rolloutHold") or {}


def _condition(s, kind: str) -> dict:
    (found,) = [c for c in s.status(NAME)["conditions"] if c["type"] == kind]
    return found


def _resting(s) -> bool:
    """Nothing in flight and nothing left to do this pass (the pause leaves the rest)."""
    return not any(row.get("operation") for row in rows(s).values()) and not s.results[-1].busy


def _no_new_update(moving: set[int]):
    """A watch: after every pass no Instance but those moving at the pause holds an
    Update operation."""
    def watch(s):
        started = _updating(s) - moving
        assert not started, f"Instances {sorted(started)} started an update while paused"
    return watch


def test_a_rollout_paused_on_the_cluster_finishes_the_moving_instance_and_resumes(backend):
    """Paused mid-rollout with the command: the Instance moving finishes, no other
    starts, the hold names Paused with who and since when, the Progressing condition
    and the report say so; resumed, the rollout completes."""
    scenario, change = backend.converged(replicas=3, grace=2, lifecycle=SURGE)
    change(image="sglang:v2")
    scenario.until(lambda s: bool(_updating(s)))
    moving = _updating(scenario)
    assert len(moving) == 1, moving
    assert "paused by oncall@example.com" in _pause(scenario)
    watch = _no_new_update(moving)
    scenario.watches.append(watch)
    scenario.until(_resting, seconds=180)
    target = scenario.replica(NAME)["spec"]["revision"]
    found = rows(scenario)
    # The moving Instance finished on the new revision; the others wait on the old one.
    assert {i for i, r in found.items() if r["revision"] == target} == moving
    assert all(r["phase"] == "Ready" for r in found.values())
    hold = _hold(scenario)
    annotation = json.loads(scenario.replica(NAME)["metadata"]["annotations"][PAUSE_ANNOTATION])
    assert (hold["gate"], hold["by"], hold["since"]) == (
        "Paused", "oncall@example.com", annotation["since"])
    assert "2 Instances wait on their revision" in hold["reason"], hold
    assert "omegitops rollout resume svc -c engine" in hold["reason"], hold
    progressing = _condition(scenario, "Progressing")
    assert progressing["reason"] == "RolloutPaused", progressing
    assert "oncall@example.com" in progressing["message"]
    assert _condition(scenario, "Ready")["reason"] == "RolloutPaused"
    report = build_report(load(scenario.repo), [scenario.replica(NAME)], scenario.events(),
                          scenario.now())
    validate_report(report)
    (engine,) = report["services"][0]["components"]
    assert engine["rolloutHold"]["by"] == "oncall@example.com"
    assert f"rollout paused by oncall@example.com since {annotation['since']}" in (
        engine["healthReason"]), engine["healthReason"]
    # More passes while paused start nothing either.
    scenario.advance(60)
    scenario.run_pass()
    assert _resume(scenario).endswith("resumed")
    scenario.watches.remove(watch)
    scenario.until(settled, seconds=300)
    assert all(r["revision"] == target for r in rows(scenario).values())
    assert _hold(scenario) == {}
    assert PAUSE_ANNOTATION not in (scenario.replica(NAME)["metadata"].get("annotations") or {})


def test_a_rollout_paused_in_git_moves_nothing_until_the_field_goes(backend):
    """``lifecycle.paused: true`` committed with a new image: nothing moves, the hold
    names Paused and the Git field; the commit that removes it resumes the rollout."""
    scenario, change = backend.converged(replicas=2, grace=2, lifecycle=SURGE)
    old = scenario.replica(NAME)["spec"]["revision"]
    scenario.watches.append(_no_new_update(set()))
    change(image="sglang:v2", lifecycle=PAUSED)
    scenario.until(lambda s: _hold(s).get("gate") == "Paused" and _resting(s))
    assert {r["revision"] for r in rows(scenario).values()} == {old}
    hold = _hold(scenario)
    assert hold["by"] == (f"Git: spec.engine.lifecycle.paused of InferenceService "
                          f"{scenario.namespace}/svc (services/svc.yaml)"), hold
    assert "remove spec.engine.lifecycle.paused in Git" in hold["reason"]
    # Resume lifts only the cluster's pause, and says Git's still holds.
    assert "still paused in Git" in _resume(scenario)
    scenario.watches.clear()
    change(image="sglang:v2", lifecycle=SURGE)
    scenario.until(settled, seconds=300)
    assert _hold(scenario) == {}


def test_repairs_and_scaling_go_on_while_paused(backend):
    """A paused rollout still restarts a crashed Instance (restartPolicy) and still
    creates the Instances a scale-up asks for: a pause stops updates only."""
    life = {**SURGE, **RECREATE}
    scenario, change = backend.converged(replicas=1, grace=2, lifecycle=life)
    change(image="sglang:v2", lifecycle=life)
    _pause(scenario)
    scenario.watches.append(_no_new_update(set()))
    scenario.until(_resting)
    scenario.fault("oom", f"{NAME}-0-default-0")
    scenario.until(lambda s: rows(s)[0]["phase"] == "Restarting")
    scenario.until(lambda s: rows(s)[0]["phase"] == "Ready" and _resting(s), seconds=180)
    assert rows(scenario)[0]["incarnation"] == 2
    change(image="sglang:v2", lifecycle=life, replicas=2)
    scenario.until(lambda s: len(rows(s)) == 2 and _resting(s), seconds=180)
    assert all(r["phase"] == "Ready" for r in rows(scenario).values())
    assert _hold(scenario)["gate"] == "Paused"


# -- sim only: the commands, validate, resolve, plan -------------------------------------

def test_the_commands_write_and_remove_the_annotation(tmp_path, cli):
    scenario, _ = converged(tmp_path, replicas=1, lifecycle=SURGE)
    where = ("-n", "demo", "--cluster", f"sim:{scenario.path}")
    code, out, err = cli("rollout", "pause", "svc", *where, "--by", "alice")
    assert code == 0, err
    assert "paused by alice" in out
    stored = scenario.replica(NAME)["metadata"]["annotations"][PAUSE_ANNOTATION]
    assert json.loads(stored)["by"] == "alice" and json.loads(stored)["since"]
    code, out, _ = cli("rollout", "pause", "svc", *where, "-c", "engine", "--by", "bob")
    assert code == 0 and "already paused by alice" in out
    code, out, _ = cli("rollout", "resume", "svc", *where)
    assert code == 0 and "resumed" in out
    assert PAUSE_ANNOTATION not in scenario.replica(NAME)["metadata"].get("annotations", {})
    code, out, err = cli("rollout", "pause", "nothere", *where)
    assert code == 1 and "not found" in err


def test_validate_names_the_file_line_and_field_of_a_pause_that_is_no_boolean(tmp_path, cli):
    repo = write_service(tmp_path / "repo", lifecycle={"paused": "yes"})
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1, (out, err)
    text = out + err
    lines = (repo / "services" / "svc.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "paused:" in text)
    assert (f"services/svc.yaml:{line}: InferenceService demo/svc: "
            "spec.engine.lifecycle.paused: 'yes' is not of type 'boolean'") in text, text


def test_resolve_shows_the_pause_and_where_it_comes_from(tmp_path, cli):
    repo = write_service(tmp_path / "repo", lifecycle={"paused": True})
    code, out, err = cli("resolve", "--repo", str(repo), "-o", "json")
    assert code == 0, err
    text = json.dumps(json.loads(out))
    assert '"paused": {"value": true, "source": "isvc"}' in text, text
    repo = write_service(tmp_path / "repo2")
    code, out, err = cli("resolve", "--repo", str(repo), "-o", "json")
    assert '"paused": {"value": false, "source": "default"}' in json.dumps(json.loads(out))


def test_the_plan_says_a_paused_component_moves_nothing(tmp_path, cli):
    scenario, change = converged(tmp_path, replicas=2, lifecycle=SURGE)
    change(image="sglang:v2", lifecycle=PAUSED)
    args = ("plan", "--repo", str(scenario.repo), "--cluster", f"sim:{scenario.path}")
    code, out, err = cli(*args, "-o", "json")
    assert code in (0, 2), err
    (engine,) = json.loads(out)["components"]
    assert (engine["toMove"], engine["heldByPause"]) == (0, 2)
    assert engine["pausedBy"].startswith("Git: spec.engine.lifecycle.paused")
    assert engine["hold"]["gate"] == "Paused"
    code, out, err = cli(*args)
    assert code in (0, 2), err
    assert "0 Instances to move to " in out
    assert "**Paused** by Git: spec.engine.lifecycle.paused" in out
    assert "2 Instances wait on their revision until the rollout is resumed" in out
