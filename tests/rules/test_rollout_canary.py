"""update-strategies.txt: "a canary's current step replaces your partition"; the
steps of ``spec.rollout.canary`` (docs/behaviour.md "Canary steps").

Each step lets that many Instances (a number, or a percentage rounded up) onto the new
revision, then waits: ``pause: {duration}`` until the time is up, ``pause: {}`` until
``omegitops rollout promote``. The step, its start and what it waits for are in the
InferenceReplica's ``status.canary`` and in the ``CanaryStep`` rollout hold. Tests
taking ``backend`` run on both backends (tests/backends.py); those taking ``tmp_path``
on ``sim:`` only.
"""

from __future__ import annotations

import json

from omegitops.commands import rollout
from omegitops.lifecycle.canary import PROMOTE_ANNOTATION
from omegitops.manifests.load import load
from omegitops.report.status import build_report, validate_report
from omegitops.util.times import parse_time
from tests.backends import NAME, rows, settled
from tests.fleet import strategy, write_service
from tests.scenario import converged

SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)
# Four Instances: one for 20 s, then half until promoted, then all.
STEPS = {"canary": {"steps": [{"replicas": 1, "pause": {"duration": "20s"}},
                              {"replicas": "50%", "pause": {}},
                              {"replicas": "100%"}]}}



def _promote(s, by: str = "release@example.com") -> str:
    with s.cluster() as cluster:
        return rollout.promote(cluster, s.namespace, "svc", "engine", by)


def _canary(s) -> dict:
    return s.status(NAME).get("canary") or {}


def _hold(s) -> dict:
    return s.status(NAME).get("rolloutHold") or {}


def _on(s, target: str) -> set[int]:
    """Instances on ``target`` or moving to it."""
    return {i for i, r in rows(s).items() if r["revision"] == target
            or (r.get("operation") or {}).get("targetRevision") == target}


def _waiting_at(step: int):
    def reached(s) -> bool:
        canary = _canary(s)
        return canary.get("step") == step and bool(canary.get("reachedAt")) \
            and _hold(s).get("gate") == "CanaryStep"
    return reached


def _within_the_step(target: str):
    """A watch: after every pass no more Instances are on (or moving to) the new revision
    than the canary's current step allows."""
    def watch(s):
        canary = _canary(s)
        if canary and not canary.get("done"):
            on = _on(s, target)
            assert len(on) <= canary["replicas"], (
                f"step {canary['step']} allows {canary['replicas']}, {sorted(on)} moved")
    return watch


def test_a_three_step_canary_waits_its_time_then_for_the_promotion(backend):
    """Step 1 moves one Instance and waits 20 s from when it is Ready; step 2 moves half
    and waits for ``rollout promote``; step 3 moves the rest. The status, the hold and
    the report name the step and what it waits for."""
    scenario, change = backend.converged(replicas=4, grace=2, lifecycle=SURGE)
    change(image="sglang:v2", lifecycle=SURGE, rollout=STEPS)
    scenario.until(_waiting_at(1), seconds=180)
    target = scenario.replica(NAME)["spec"]["revision"]
    scenario.watches.append(_within_the_step(target))
    canary = _canary(scenario)
    assert (canary["step"], canary["steps"], canary["replicas"], canary["pause"]) == (
        1, 3, 1, "20s")
    assert parse_time(canary["endsAt"]) - parse_time(canary["reachedAt"]) == 20
    assert "its pause of 20s to end at" in canary["waitingFor"], canary
    assert {i for i, r in rows(scenario).items() if r["revision"] == target} == {3}
    hold = _hold(scenario)
    assert hold["since"] == canary["reachedAt"], (hold, canary)
    assert hold["reason"].startswith(
        f"canary step 1/3: 1 Instance on {target}, 3 wait for its pause of 20s"), hold
    report = build_report(load(scenario.repo), [scenario.replica(NAME)], scenario.events(),
                          scenario.now())
    validate_report(report)
    (engine,) = report["services"][0]["components"]
    assert engine["canary"]["step"] == 1, engine
    assert "canary step 1/3" in engine["healthReason"], engine["healthReason"]
    # The timed pause ends by itself: step 2 moves a second Instance and waits.
    scenario.until(_waiting_at(2), seconds=180)
    canary = _canary(scenario)
    assert (canary["replicas"], canary["pause"]) == (2, "promotion")
    assert len({i for i, r in rows(scenario).items() if r["revision"] == target}) == 2
    assert "omegitops rollout promote svc -c engine" in _hold(scenario)["reason"]
    # More passes, more time: nothing moves until the promotion.
    scenario.advance(30)
    scenario.run_pass()
    assert _canary(scenario)["step"] == 2
    assert "promoted by release@example.com" in _promote(scenario)
    assert "already promoted" in _promote(scenario)
    annotation = json.loads(scenario.replica(NAME)["metadata"]["annotations"][
        PROMOTE_ANNOTATION])
    assert (annotation["step"], annotation["target"]) == (2, target)
    scenario.until(settled, seconds=300)
    assert all(r["revision"] == target for r in rows(scenario).values())
    assert _canary(scenario) == {} and _hold(scenario) == {}


def test_a_revision_that_fails_during_a_step_is_held_and_the_canary_stops(backend):
    """The canary's Instance fails on the new revision: the revision is held as without a
    canary, the step never ends and no other Instance moves."""
    values = {"lifecycle": {"stuckPodGracePeriod": "20s"}}  # no updateRetry: held at once
    scenario, change = backend.converged(replicas=3, grace=2, lifecycle=SURGE,
                                         values=values)
    steps = {"canary": {"steps": [{"replicas": 1, "pause": {"duration": "5s"}},
                                  {"replicas": 3}]}}
    scenario.fault("imagepull", image="unpullable:v2")
    change(image="unpullable:v2", rollout=steps)
    scenario.until(lambda s: _hold(s).get("gate") == "Held", seconds=300)
    target = scenario.replica(NAME)["spec"]["revision"]
    scenario.watches.append(_within_the_step(target))
    canary = _canary(scenario)
    assert canary["step"] == 1 and not canary.get("reachedAt"), canary
    assert "the canary stops at this step" in canary["waitingFor"], canary
    scenario.advance(60)
    scenario.run_pass()
    assert _canary(scenario)["step"] == 1
    assert len(_on(scenario, target)) <= 1


def test_spec_rollout_paused_pauses_every_component(backend):
    """``spec.rollout.paused: true`` pauses the engine as its own ``lifecycle.paused``
    would, and the hold names the service's field."""
    scenario, change = backend.converged(replicas=2, grace=2, lifecycle=SURGE)
    old = scenario.replica(NAME)["spec"]["revision"]
    change(image="sglang:v2", lifecycle=SURGE, rollout={"paused": True})
    scenario.until(lambda s: _hold(s).get("gate") == "Paused" and not s.results[-1].busy)
    assert {r["revision"] for r in rows(scenario).values()} == {old}
    assert _hold(scenario)["by"] == (f"Git: spec.rollout.paused of InferenceService "
                                     f"{scenario.namespace}/svc (services/svc.yaml)")
    assert "remove spec.rollout.paused in Git" in _hold(scenario)["reason"]
    change(image="sglang:v2", lifecycle=SURGE)
    scenario.until(settled, seconds=300)
    assert _hold(scenario) == {}


# -- sim only: Git moves the steps, the command, validate, resolve, plan -----------------

def test_git_moves_an_indefinite_step_on(tmp_path):
    """A step waiting for promotion goes on when Git changes it (here: takes its pause
    away)."""
    scenario, change = converged(tmp_path, replicas=2, grace=2, lifecycle=SURGE)
    waiting = {"canary": {"steps": [{"replicas": 1, "pause": {}}, {"replicas": 2}]}}
    change(image="sglang:v2", lifecycle=SURGE, rollout=waiting)
    scenario.until(lambda s: bool((s.status(NAME).get("canary") or {}).get("reachedAt"))
                   and not s.results[-1].busy)
    assert scenario.status(NAME)["rolloutHold"]["gate"] == "CanaryStep"
    change(image="sglang:v2", lifecycle=SURGE,
           rollout={"canary": {"steps": [{"replicas": 1}, {"replicas": 2}]}})
    scenario.until_idle()
    target = scenario.replica(NAME)["spec"]["revision"]
    assert all(r["revision"] == target for r in rows(scenario).values())


def test_get_irep_wide_shows_the_canary_step(tmp_path, cli):
    scenario, change = converged(tmp_path, replicas=2, grace=2, lifecycle=SURGE)
    change(image="sglang:v2", lifecycle=SURGE,
           rollout={"canary": {"steps": [{"replicas": 1, "pause": {}}, {"replicas": 2}]}})
    scenario.until(lambda s: bool((s.status(NAME).get("canary") or {}).get("reachedAt")))
    code, out, err = cli("get", "irep", "-n", "demo", "-o", "wide",
                         "--cluster", f"sim:{scenario.path}")
    assert code == 0, err
    (header, line) = out.splitlines()
    assert header.split()[-2:] == ["HOLD", "CANARY"], header
    assert line.split()[-3:] == ["CanaryStep", "1/2", "promotion"], line


def test_promote_without_a_canary_says_so(tmp_path, cli):
    scenario, _ = converged(tmp_path, replicas=1, lifecycle=SURGE)
    where = ("-n", "demo", "--cluster", f"sim:{scenario.path}")
    code, out, err = cli("rollout", "promote", "svc", *where, "--by", "alice")
    assert code == 1 and "no canary step of svc (engine) in demo to promote" in err, (out, err)


def _line_of(repo, needle: str) -> int:
    lines = (repo / "services" / "svc.yaml").read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if needle in text)


def test_validate_names_the_file_line_and_field_of_bad_rollout_values(tmp_path, cli):
    cases = [
        ({"paused": "yes"}, "paused:", "spec.rollout.paused: 'yes' is not of type 'boolean'"),
        ({"canary": {"steps": [{"replicas": "half"}]}}, "replicas:",
         "spec.rollout.canary.steps[0].replicas: 'half'"),
        ({"canary": {"steps": [{"replicas": 1, "pause": {"duration": "ten minutes"}}]}},
         "duration:", "spec.rollout.canary.steps[0].pause.duration: 'ten minutes'"),
        ({"canary": {"steps": [{"replicas": 1, "wait": "1m"}]}}, "wait:",
         "spec.rollout.canary.steps[0].wait: unknown field"),
        ({"canary": {"steps": [{"replicas": 1}, {"replicas": "150%"}]}}, "150%",
         "spec.rollout.canary.steps[1].replicas: 150% is more than 100%"),
        ({"canary": {"components": ["prefill"], "steps": [{"replicas": 1}]}}, "- prefill",
         "spec.rollout.canary.components[0]: 'prefill' is not one of"),
    ]
    for number, (rollout_block, needle, message) in enumerate(cases):
        repo = write_service(tmp_path / f"repo{number}", rollout=rollout_block)
        code, out, err = cli("validate", "--repo", str(repo))
        assert code == 1, (rollout_block, out, err)
        text = out + err
        line = _line_of(repo, needle)
        assert f"services/svc.yaml:{line}: InferenceService demo/svc: {message}" in text, text


def test_resolve_shows_the_rollout_fields_and_their_source(tmp_path, cli):
    repo = write_service(tmp_path / "repo", lifecycle={"paused": False},
                         rollout={"paused": True, **STEPS})
    code, out, err = cli("resolve", "--repo", str(repo), "-o", "json")
    assert code == 0, err
    text = json.dumps(json.loads(out))
    # The service's spec.rollout.paused wins over the engine's own lifecycle.paused: false.
    assert ('"paused": {"value": true, "source": "isvc", "field": "spec.rollout.paused"}'
            in text), text
    assert '"canary.steps": {"value": [{"replicas": 1' in text, text
    assert '"source": "isvc", "field": "spec.rollout.canary.steps"}' in text, text
    code, out, err = cli("resolve", "--repo", str(repo))
    assert code == 0, err
    assert "isvc (spec.rollout.paused)" in out, out
    repo = write_service(tmp_path / "repo2", rollout={
        "canary": {"components": ["decoder"], "steps": [{"replicas": 1}]}})
    code, out, err = cli("resolve", "--repo", str(repo), "-o", "json")
    assert '"canary.steps": {"value": null, "source": "default"}' in json.dumps(
        json.loads(out)), out



def test_the_plan_forecasts_the_canary_steps(tmp_path, cli):
    scenario, change = converged(tmp_path, replicas=4, lifecycle=SURGE)
    change(image="sglang:v2", lifecycle=SURGE, rollout=STEPS)
    args = ("plan", "--repo", str(scenario.repo), "--cluster", f"sim:{scenario.path}")
    code, out, err = cli(*args, "-o", "json")
    assert code in (0, 2), err
    (engine,) = json.loads(out)["components"]
    assert engine["canary"]["steps"] == [
        {"step": 1, "replicas": 1, "pause": "20s"},
        {"step": 2, "replicas": 2, "pause": "promotion"},
        {"step": 3, "replicas": 4, "pause": None}], engine["canary"]
    code, out, err = cli(*args)
    assert code in (0, 2), err
    assert "**Canary** in 3 steps" in out, out
    assert "step 2: 2 Instances, then waits until promoted" in out, out
    # The forecast waits out the timed pause and stops at the promotion; the gantt
    # draws both pauses between the Instances' operations.
    assert "Canary step 1 pause 20s (20s)" in out, out
    assert "Canary step 2 waits for promotion" in out, out
    assert "2/4 Instances updated" in out, out
