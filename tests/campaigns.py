"""The nightly fault campaigns: many seeds, one JSON document of what they found.

    python tests/campaigns.py --seeds 100 --examples 40

runs, for each seed from ``--from`` (default ``OMEGITOPS_CAMPAIGN_SEED``, else 0),
``--examples`` fault campaigns and ``--kill-examples`` killed-job campaigns of
``tests/app/test_fault_campaigns.py``: the same generators, the same invariants after
every pass, the same convergence at the end. CI runs a fixed handful of examples;
this explores new ones. Seeds run in parallel (``--jobs``, default every core).

Every campaign runs to its end: a failure is recorded and the next campaign goes
on, so the document counts campaigns run and failures by invariant, and keeps
for each failure its seed, the invariant's message and the campaign's plan (which
``run_campaign`` replays as it is). A progress line per seed, and each failure
as it happens (with its plan, as JSON), go to standard error; the document goes to
standard output. Exit 1 when anything failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import marshal
import os
import re
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

# What each invariant's failure says (tests/chaos.py, tests/scenario.py), and its name.
INVARIANTS = [
    (r"partly in rotation", "gang-in-rotation-whole"),
    (r"mixes (revisions|pods|incarnations)", "gang-on-one-revision"),
    (r"doubled", "no-instance-doubled"),
    (r"vanished", "no-instance-lost"),
    (r"have no row|pods without an InferenceReplica|unmanaged pod", "no-orphan-pod"),
    (r"over the ceiling", "surge-budget"),
    (r"out of service, budget", "unavailability-budget"),
    (r"after a failed read", "no-write-after-failed-read"),
    (r"is Ready with \d+/\d+ pods", "no-ready-instance-short-of-pods"),
    (r"still busy after", "converges"),
    (r"after convergence still writes", "idle-pass-writes-nothing"),
]


def invariant_of(error: BaseException) -> str:
    """The invariant a failure broke: by its message, else where the assertion is."""
    text = f"{type(error).__name__}: {error}"
    for pattern, name in INVARIANTS:
        if re.search(pattern, text):
            return name
    if not isinstance(error, AssertionError):
        return f"crash: {type(error).__name__}"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "/tests/" in f.filename]
    where = frames[-1] if frames else None
    return f"assert in {where.name}: {where.line}" if where else "assert"


def _plan_json(plan: dict) -> dict:
    return json.loads(json.dumps(
        {**plan, "fleet": [dataclasses.asdict(svc) for svc in plan["fleet"]]}))


def replay(plan: dict) -> None:
    """Run one recorded fault campaign again (its ``plan`` from the document), printing
    the campaign's log when it fails."""
    from tests.app import test_fault_campaigns as campaigns
    from tests.chaos import Service

    plan = {**plan, "fleet": [Service(**svc) for svc in plan["fleet"]],
            "events": [(at, tuple(event)) for at, event in plan["events"]]}
    with tempfile.TemporaryDirectory() as tmp:
        campaigns.run_campaign(Path(tmp), plan, echo=True)


class MemoryStore:
    """The simulated cluster's state kept in this process as marshal snapshots.

    Each ``SimCluster`` open still reads a copy and each clean close still writes one
    (an exception saves nothing), as with the file; only JSON and fsync, half of a
    campaign's time, are gone. The store's own behaviour is tested elsewhere; the
    campaigns test the planner, and a nightly run is sized by how many they can run.
    """

    def __init__(self) -> None:
        self.states: dict[str, bytes] = {}

    def load(self, path: Path) -> dict | None:
        raw = self.states.get(str(path))
        return None if raw is None else marshal.loads(raw)

    def save(self, path: Path, state: dict) -> None:
        self.states[str(path)] = marshal.dumps(state)

    def install(self) -> None:
        from omegitops.cluster.sim import cluster

        cluster.load_state, cluster.save_state = self.load, self.save
        # One process, one campaign at a time: the file lock guards nothing here.
        cluster.FileLock.acquire = cluster.FileLock.release = lambda lock: None


def _campaign_settings(examples: int, seed_value: int):
    def wrap(test):
        test = settings(max_examples=max(1, examples), deadline=None, database=None,
                        derandomize=False, phases=[Phase.generate],
                        suppress_health_check=list(HealthCheck))(test)
        return seed(seed_value)(test)
    return wrap


def run_seed(seed_value: int, examples: int, kill_examples: int) -> dict:
    """Every campaign of one seed; failures recorded, never raised."""
    from tests.app import test_fault_campaigns as campaigns
    from tests.chaos import Campaign

    found: dict = {"seed": seed_value, "campaigns": 0, "failures": []}
    store = MemoryStore()
    store.install()

    def record(kind: str, error: BaseException, plan: dict) -> None:
        failure = {"seed": seed_value, "kind": kind, "invariant": invariant_of(error),
                   "message": str(error).splitlines()[0][:300] if str(error)
                   else type(error).__name__,
                   "plan": plan}
        found["failures"].append(failure)
        print(f"seed {seed_value}: {kind} campaign failed: {failure['invariant']}: "
              f"{failure['message']}\n  {json.dumps(failure)}", file=sys.stderr, flush=True)

    @_campaign_settings(examples, seed_value)
    @given(campaigns.campaigns())
    def faults(plan):
        found["campaigns"] += 1
        before = _plan_json(plan)  # the campaign changes its services as it goes
        try:
            with tempfile.TemporaryDirectory() as tmp:
                campaigns.run_campaign(Path(tmp), plan)
        except Exception as error:  # noqa: BLE001 - every failure is a finding
            record("faults", error, before)
        store.states.clear()

    @_campaign_settings(kill_examples, seed_value)
    @given(campaigns.services(0), st.lists(st.sampled_from(["image", "env", "scale"]),
                                           min_size=1, max_size=3),
           st.integers(0, 2**32 - 1))
    def kills(svc, changes, rng_seed):
        import random

        found["campaigns"] += 1
        before = {"service": dataclasses.asdict(svc), "changes": changes, "seed": rng_seed}
        try:
            with tempfile.TemporaryDirectory() as tmp:
                rng = random.Random(rng_seed)
                campaign = Campaign(Path(tmp), [svc], {}, rng, api_rate=0.0, kill_rate=0.5)
                campaigns.drive_killed(campaign, svc, changes, rng)
        except Exception as error:  # noqa: BLE001
            record("kills", error, before)
        store.states.clear()

    if examples:
        faults()
    if kill_examples:
        kills()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--from", dest="first", type=int,
                        default=int(os.environ.get("OMEGITOPS_CAMPAIGN_SEED", "0")))
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--kill-examples", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    started = time.monotonic()
    seeds = range(args.first, args.first + args.seeds)
    results = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_seed, s, args.examples, args.kill_examples): s
                   for s in seeds}
        for future in as_completed(futures):
            found = future.result()
            results.append(found)
            print(f"seed {found['seed']}: {found['campaigns']} campaigns, "
                  f"{len(found['failures'])} failed "
                  f"({len(results)}/{len(seeds)}, {time.monotonic() - started:.0f}s)",
                  file=sys.stderr, flush=True)
    failures = [f for found in sorted(results, key=lambda r: r["seed"])
                for f in found["failures"]]
    by_invariant: dict[str, int] = {}
    for failure in failures:
        by_invariant[failure["invariant"]] = by_invariant.get(failure["invariant"], 0) + 1
    document = {
        "seeds": {"from": args.first, "count": args.seeds},
        "examples_per_seed": {"faults": args.examples, "kills": args.kill_examples},
        "campaigns": sum(r["campaigns"] for r in results),
        "failed": len(failures),
        "failures_by_invariant": dict(sorted(by_invariant.items())),
        "seconds": round(time.monotonic() - started, 1),
        "failures": failures,
    }
    json.dump(document, sys.stdout, indent=2, default=str)
    print()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
