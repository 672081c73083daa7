"""update-strategies.txt: "Rollout groups: roll the engine and the decoder out as one";
"In a rollout group, the group's limits apply too, and a canary's current step replaces
your partition"; restart-policy.txt: "no repair waits for its rollout group"
(docs/behaviour.md "Rollout groups").

A prefill/decode service (an engine and a decoder) whose members move as the group
``pd`` of ``spec.rollout.groups``. After every pass a watch checks that no member runs
ahead of the group: each member has at most the group's share of its Instances on (or
moving to) its new revision, the share of the slowest member once one more of its
Instances is Ready there (lifecycle/groups.py). Tests taking ``backend`` run on both
backends (tests/backends.py); those taking ``tmp_path`` on ``sim:`` only.
"""

from __future__ import annotations

import math
from fractions import Fraction

from omegitops.commands import rollout
from omegitops.lifecycle.canary import CanaryStep, allowed_at
from omegitops.manifests.load import load
from omegitops.render import pods as P
from omegitops.report.status import build_report, validate_report
from tests.fleet import strategy, write_service
from tests.scenario import converged

ENGINE, DECODER = "svc-engine", "svc-decoder"
SURGE = strategy("SurgeThenDrain", maxSurge=2, maxUnavailable=0)
PD = {"name": "pd", "components": ["engine", "decoder"]}
# Four engines and two decoders: a quarter (one engine, one decoder) for 20 s, then
# half (two engines, one decoder) until promoted, then all.
STEPS = [{"replicas": "25%", "pause": {"duration": "20s"}},
         {"replicas": "50%", "pause": {}},
         {"replicas": "100%"}]


def _service(**more):
    return {"replicas": 4, "decoder": 2, "grace": 2, "lifecycle": SURGE,
            "decoder_lifecycle": SURGE, **more}


def _rows(s, name: str) -> list[dict]:
    return [r for r in s.rows(name) if r.get("surgeOf") is None]


def _target(s, name: str) -> str:
    return s.replica(name)["spec"]["revision"]


def _moved(s, name: str) -> int:
    target = _target(s, name)
    return sum(1 for r in _rows(s, name) if r["revision"] == target
               or (r.get("operation") or {}).get("targetRevision") == target)


def _done(s, name: str) -> int:
    target = _target(s, name)
    return sum(1 for r in _rows(s, name) if r["revision"] == target
               and r["phase"] == "Ready" and not r.get("operation"))


def _count(s, name: str) -> int:
    return s.replica(name)["spec"]["replicas"]


def _in_step(engine: int = 2, decoder: int = 2):
    """A watch: no member has more Instances on (or moving to) its new revision than the
    group's next wave lets it: the lowest share a member reaches once its next batch
    (``engine``, ``decoder``: what its own budget moves at once) is Ready there, of the
    member's own count, rounded up."""
    batches = {ENGINE: engine, DECODER: decoder}

    def watch(s) -> None:
        wave = min(min(Fraction(1), Fraction(_done(s, n) + b, _count(s, n)))
                   for n, b in batches.items())
        for name in batches:
            allowed = math.ceil(wave * _count(s, name))
            assert _moved(s, name) <= allowed, (
                f"{name} ran ahead of group pd: {_moved(s, name)} moved, the group lets "
                f"{allowed} ({ {n: (_done(s, n), _moved(s, n)) for n in batches} })")
    return watch


def _steps_apart(steps: list[dict]):
    """A watch: the members are never more than one canary step apart (the step a
    member's moved Instances need, against the other's)."""
    parsed = [CanaryStep(step["replicas"]) for step in steps]

    def need(s, name: str) -> int:
        moved = _moved(s, name)
        return next(number for number, step in enumerate(parsed, 1)
                    if allowed_at(step, _count(s, name)) >= moved)

    def watch(s):
        engine, decoder = need(s, ENGINE), need(s, DECODER)
        assert abs(engine - decoder) <= 1, (engine, decoder)
    return watch


def _hold(s, name: str) -> dict:
    return s.status(name).get("rolloutHold") or {}


def _settled(s) -> bool:
    return all(_done(s, n) == _count(s, n) == len(_rows(s, n)) for n in (ENGINE, DECODER)) \
        and not s.results[-1].busy


def _reached(step: int):
    def reached(s) -> bool:
        return all((s.status(n).get("canary") or {}).get("step") == step
                   and bool((s.status(n).get("canary") or {}).get("reachedAt"))
                   for n in (ENGINE, DECODER))
    return reached


def test_a_group_canary_moves_the_engine_and_the_decoder_in_step(backend):
    """Both members take each step together: a quarter (one of four engines, one of two
    decoders), half after 20 s (two engines; the decoder's half is its one), then the
    rest once promoted. The decoder never runs ahead of the engine, nor the engine of
    the decoder; one promote of the engine promotes the group."""
    scenario, change = backend.converged(**_service())
    change(**_service(image="sglang:v2", rollout={"groups": [PD], "canary": {"steps": STEPS}}))
    scenario.watches.extend([_in_step(), _steps_apart(STEPS)])
    scenario.until(_reached(1), seconds=240)
    assert (_moved(scenario, ENGINE), _moved(scenario, DECODER)) == (1, 1)
    group = scenario.status(ENGINE)["group"]
    assert (group["name"], group["members"]) == ("pd", ["engine", "decoder"]), group
    scenario.until(_reached(2), seconds=240)
    assert (_moved(scenario, ENGINE), _moved(scenario, DECODER)) == (2, 1)
    assert _hold(scenario, ENGINE)["gate"] == "CanaryStep", _hold(scenario, ENGINE)
    scenario.advance(30)
    scenario.run_pass()
    assert (_moved(scenario, ENGINE), _moved(scenario, DECODER)) == (2, 1)
    with scenario.cluster() as cluster:
        said = rollout.promote(cluster, scenario.namespace, "svc", "engine", "release")
    assert said.startswith("rollout group pd: every member takes the step"), said
    assert "svc (decoder)" in said and "promoted by release" in said, said
    scenario.until(_settled, seconds=400)


def test_a_rolling_group_moves_its_members_at_the_slowest_members_pace(backend):
    """Without a canary the group still moves in step: the engines may all surge at once
    on their own, the decoders one at a time; so half the engines move with the first
    decoder, and the other half once it is Ready on the new revision. The engines that
    wait name the group and the decoder in their hold."""
    service = _service(lifecycle=strategy("SurgeThenDrain", maxSurge="100%",
                                          maxUnavailable=0),
                       decoder_lifecycle=strategy("SurgeThenDrain", maxSurge=1,
                                                  maxUnavailable=0),
                       decoder_startup=40)  # the engines are Ready first, and wait
    scenario, change = backend.converged(**service)
    change(**{**service, "image": "sglang:v2", "rollout": {"groups": [PD]}})
    scenario.watches.append(_in_step(4, 1))
    holds = []
    scenario.watches.append(lambda s: holds.append(_hold(s, ENGINE)))
    scenario.until(lambda s: _hold(s, ENGINE).get("gate") == "Group", seconds=240)
    report = build_report(load(scenario.repo), [scenario.replica(ENGINE)],
                          scenario.events(), scenario.now())
    validate_report(report)
    engine = next(c for c in report["services"][0]["components"]
                  if c["component"] == "engine")
    assert "held: rollout group pd (engine, decoder)" in engine["healthReason"], engine
    scenario.until(_settled, seconds=400)
    group = [h for h in holds if h.get("gate") == "Group"]
    assert group, holds
    assert group[0]["reason"].startswith("rollout group pd (engine, decoder) lets"), group[0]
    assert "wait for decoder: decoder has 0/2 Instances Ready" in group[0]["reason"], group[0]


def test_the_groups_own_budget_applies_on_top_of_each_members(backend):
    """Each member may surge two; the group ``maxSurge: 1`` lets one surge at a time
    across both."""
    scenario, change = backend.converged(**_service())
    change(**_service(image="sglang:v2", rollout={"groups": [{**PD, "maxSurge": 1}]}))

    def one_surge(s):
        surges = sum(1 for n in (ENGINE, DECODER) for r in s.rows(n)
                     if (r.get("operation") or {}).get("mode") == "Surge")
        assert surges <= 1, surges
    scenario.watches.extend([_in_step(), one_surge])
    scenario.until(_settled, seconds=600)


def test_a_repair_does_not_wait_for_the_group(backend):
    """An engine held on its old revision by the group crashes: it is restarted at once
    (restartPolicy), while the group still holds its update."""
    life = {**strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0),
            "restartPolicy": "RecreateInstanceOnPodRestart"}
    # The canary holds the decoder at one Instance until promoted; the group holds the
    # engines to the same share.
    steps = [{"replicas": "50%", "pause": {}}, {"replicas": "100%"}]
    service = _service(lifecycle=life, decoder_lifecycle=life)
    scenario, change = backend.converged(**service)
    change(**{**service, "image": "sglang:v2",
              "rollout": {"groups": [PD], "canary": {"steps": steps}}})
    scenario.watches.append(_in_step(1, 1))
    scenario.until(_reached(1), seconds=240)
    old = [r for r in _rows(scenario, ENGINE) if r["revision"] != _target(scenario, ENGINE)]
    index = old[0]["index"]
    scenario.fault("oom", f"{ENGINE}-{index}-default-0")
    scenario.until(lambda s: next(r for r in _rows(s, ENGINE) if r["index"] == index)
                   ["phase"] == "Restarting", seconds=120)
    scenario.until(lambda s: next(r for r in _rows(s, ENGINE) if r["index"] == index)
                   ["phase"] == "Ready", seconds=180)
    row = next(r for r in _rows(scenario, ENGINE) if r["index"] == index)
    assert row["incarnation"] == 2 and row["revision"] != _target(scenario, ENGINE), row
    assert scenario.status(ENGINE)["group"]["name"] == "pd"


# -- sim only: validate, resolve ----------------------------------------------------------

def _line_of(repo, needle: str, after: str = "groups:") -> int:
    lines = (repo / "services" / "svc.yaml").read_text().splitlines()
    start = next(i for i, text in enumerate(lines, 1) if after in text)
    return next(i for i, text in enumerate(lines, 1) if i > start and needle in text)


def test_validate_names_the_file_line_and_field_of_a_bad_group(tmp_path, cli):
    two = [PD, {"name": "again", "components": ["decoder", "router"]}]
    cases = [
        ({"groups": two}, "- decoder", ("spec.rollout.groups[1].components[0]: decoder is in "
         "rollout group pd already"), {"decoder": 1, "after": "name: again"}),
        ({"groups": [PD]}, "- decoder", ("spec.rollout.groups[0].components[1]: decoder is "
         "not a component of the service (it runs engine)"), {}),
        ({"groups": [{"name": "pd", "components": ["engine"]}]}, "components:",
         "spec.rollout.groups[0].components: ['engine'] is too short", {"decoder": 1}),
        ({"groups": [PD], "canary": {"components": ["engine"], "steps": [{"replicas": 1}]}},
         "components:", ("spec.rollout.groups[0].components: the canary "
         "(spec.rollout.canary.components) moves engine but not the rest of rollout "
         "group pd"), {"decoder": 1}),
    ]
    for number, (block, needle, message, more) in enumerate(cases):
        after = more.pop("after", "groups:")
        repo = write_service(tmp_path / f"repo{number}", rollout=block, **more)
        code, out, err = cli("validate", "--repo", str(repo))
        assert code == 1, (block, out, err)
        line = _line_of(repo, needle, after)
        assert f"services/svc.yaml:{line}: InferenceService demo/svc: {message}" in out + err, (
            out + err)


def test_validate_refuses_what_a_blue_green_group_cannot_do(tmp_path, cli):
    blue = {**PD, "strategy": "blueGreen"}
    cases = [
        ({"groups": [blue], "canary": {"steps": [{"replicas": 1}]}}, "strategy:",
         "spec.rollout.groups[0].strategy: rollout group pd switches at once (blueGreen)",
         {}),
        ({"groups": [{**blue, "maxSurge": 1}]}, "maxSurge:",
         ("spec.rollout.groups[0].maxSurge: a blueGreen group brings up every member's "
         "whole new set at once"), {}),
        ({"groups": [blue]}, "- decoder",
         "spec.rollout.groups[0].components[1]: decoder updates by InPlaceIfPossible",
         {"decoder_lifecycle": strategy("InPlaceIfPossible")}),
    ]
    for number, (block, needle, message, more) in enumerate(cases):
        repo = write_service(tmp_path / f"repo{number}", rollout=block, decoder=1, **more)
        code, out, err = cli("validate", "--repo", str(repo))
        assert code == 1, (block, out, err)
        line = _line_of(repo, needle)
        assert f"services/svc.yaml:{line}: InferenceService demo/svc: {message}" in (
            out + err), out + err


def test_validate_refuses_a_member_not_on_omenative(tmp_path, cli):
    repo = write_service(tmp_path / "repo", decoder=1, rollout={"groups": [PD]})
    path = repo / "services" / "svc.yaml"
    text = path.read_text().replace("  decoder:\n", "  decoder:\n    annotations:\n"
                                    "      ome.io/deploymentMode: RawDeployment\n", 1)
    path.write_text(text)
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1 and "decoder does not run on OMENative" in out + err, (out, err)


def test_resolve_shows_the_group_and_its_source(tmp_path, cli):
    import json

    repo = write_service(tmp_path / "repo", decoder=1, rollout={"groups": [PD]})
    code, out, err = cli("resolve", "--repo", str(repo), "-o", "json")
    assert code == 0, err
    text = json.dumps(json.loads(out))
    assert ('"group": {"value": {"name": "pd", "components": ["engine", "decoder"]}, '
            '"source": "isvc", "field": "spec.rollout.groups.0"}') in text, text


def test_a_group_at_rest_stays_converged(tmp_path):
    """Nothing to move: the members' plans do nothing and the pass is idle."""
    scenario, _ = converged(tmp_path, **_service(rollout={"groups": [PD]}))
    result = scenario.run_pass()
    assert not result.busy


BLUE_GREEN = {"groups": [{**PD, "strategy": "blueGreen"}]}
ONE_AT_A_TIME = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)


def _switched(s, name: str) -> int:
    """Instances of ``name`` on its new revision, or handed over to it."""
    target = _target(s, name)
    return sum(1 for r in _rows(s, name) if r["revision"] == target
               or (r.get("operation") or {}).get("handedOver"))


def _all_at_once(moved: list[int], switched_at: list[int]):
    """A watch: either no Instance of the group has switched or all have, and no new
    pod serves before the switch (the preview set is out of rotation until then).
    Records the Instances moving to their new revision each pass in ``moved``, and
    the pass of the switch in ``switched_at``."""
    names = (ENGINE, DECODER)

    def watch(s) -> None:
        count = sum(_switched(s, n) for n in names)
        assert count in (0, sum(_count(s, n) for n in names)), {
            n: (_switched(s, n), _moved(s, n)) for n in names}
        serving_new = [p["metadata"]["name"] for n in names for p in s.pods(f"{n}-")
                       if P.revision_of(p) == _target(s, n) and P.gate_set(p)]
        assert count or not serving_new, serving_new
        moved.append(sum(_moved(s, n) for n in names))
        if count and not switched_at:
            switched_at.append(len(s.results))
    return watch


def test_a_blue_green_group_switches_every_member_at_once(backend):
    """``strategy: blueGreen``: every engine and decoder brings up its new pod beside
    the old one, out of rotation, whatever their own maxSurge; once all are Available
    every member hands over in the same pass, then the old pods drain. After every pass
    either no Instance of the group serves from its new pods or all do: the engines,
    Ready long before the decoders, wait for them."""
    service = _service(replicas=2, lifecycle=ONE_AT_A_TIME, decoder_lifecycle=ONE_AT_A_TIME,
                       decoder_startup=60)
    scenario, change = backend.converged(**service)
    change(**{**service, "image": "sglang:v2", "rollout": BLUE_GREEN})
    peak: list[int] = []
    scenario.watches.append(_all_at_once(peak, []))
    scenario.until(_settled, seconds=400)
    assert max(peak) == 4, peak  # the whole new set beside the old
    assert scenario.status(ENGINE)["group"]["strategy"] == "blueGreen"


def test_a_blue_green_group_of_gangs_switches_every_member_at_once(backend):
    """A gang member of a blue-green group brings up a whole replacement Instance at a
    new index beside each old one (the multi-pod surge of update-strategies.txt), its
    leader and workers out of rotation, Ready once their containers have been ready for
    minReadySeconds; serving switches to every member's new set in one pass, then the
    old Instances drain whole. After every pass no new pod serves before the switch."""
    service = _service(replicas=2, workers=1, lifecycle=ONE_AT_A_TIME,
                       decoder_lifecycle=ONE_AT_A_TIME, decoder_startup=60)
    scenario, change = backend.converged(**service)
    old_indices = {r["index"] for r in _rows(scenario, ENGINE)}
    change(**{**service, "image": "sglang:v2", "rollout": BLUE_GREEN})
    switched_at: list[int] = []
    scenario.watches.append(_all_at_once([], switched_at))
    scenario.until(_settled, seconds=400)
    assert switched_at
    new_indices = {r["index"] for r in _rows(scenario, ENGINE)}
    assert not new_indices & old_indices, (old_indices, new_indices)
    # A migration or a multi-pod surge's replacement starts at incarnation 1 (instances.txt).
    assert {r["incarnation"] for r in _rows(scenario, ENGINE)} == {1}


def test_the_plan_forecasts_a_group_canary_in_step(tmp_path, cli):
    """The PR plan's forecast runs the group's passes: the gantt draws each member's
    operations and its canary pauses, no member's Instance operation starts past the
    step the group is at, and both stop at the promotion with their own counts."""
    scenario, change = converged(tmp_path, **_service(rollout={"groups": [PD]}))
    change(**_service(image="sglang:v2",
                      rollout={"groups": [PD], "canary": {"steps": STEPS}}))
    code, out, err = cli("plan", "--repo", str(scenario.repo),
                         "--cluster", f"sim:{scenario.path}")
    assert code in (0, 2), err
    gantt = out.split("```mermaid", 1)[1].split("```", 1)[0]
    sections = {}
    for line in gantt.splitlines():
        line = line.strip()
        if line.startswith("section "):
            current = sections.setdefault(line.removeprefix("section "), [])
        elif sections and ":" in line:
            current.append(line)
    assert set(sections) == {"demo/svc engine", "demo/svc decoder"}, gantt
    for name, bars in sections.items():
        labels = [bar.split(":", 1)[0] for bar in bars]
        assert any(label.startswith("Canary step 1 pause 20s") for label in labels), bars
        assert labels[-1].startswith("Canary step 2 waits for promotion"), bars
        # Before step 1's pause ends, only step 1's Instance of each member moved.
        pause_end = next(int(bar.rsplit(",", 1)[1]) for bar in bars
                         if bar.startswith("Canary step 1"))
        early = [bar for bar in bars if bar.startswith("Instance")
                 and int(bar.rsplit(",", 2)[1]) < pause_end]
        assert len(early) == 1, (name, bars)
    assert "demo/svc decoder: 1/2 Instances updated" in out, out
    assert "demo/svc engine: 2/4 Instances updated" in out, out
