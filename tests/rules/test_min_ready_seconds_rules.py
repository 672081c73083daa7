"""min-ready-seconds.txt: each new pod's warm-up window, and what it delays.

The rules of ``min-ready-seconds.txt``, one scenario each: those where the product once differed from
the document. A test that takes the ``backend`` fixture is written once against a
driver (``tests/backends.py``) and runs on both backends: on the simulated cluster,
where ``advance`` jumps the clock, and on the real control plane (marked
``controlplane``), each pass as the job's ServiceAccount on KWOK's pod timings and the
wall clock. A test that takes ``tmp_path`` needs the simulated clock or its faults and
runs on ``sim:`` only. The invariants of ``tests/scenario.py`` hold after every pass.

More of the document, pass by pass on ``sim:``: ``tests/lifecycle/test_updates.py``,
``tests/lifecycle/test_instances.py``; its precedence, ``tests/render/test_resolve.py``.
"""

from __future__ import annotations

import pytest
import yaml

from omegitops.render import pods as P
from tests.backends import NAME, rows, settled
from tests.fleet import write_service
from tests.scenario import Scenario

# -- 13. a pinned service keeps its runtime's lifecycle until the pin moves --------------

def _edit(path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


def test_a_pinned_service_takes_the_runtimes_new_min_ready_seconds_only_when_the_pin_moves(
        backend):
    """min-ready-seconds.txt: a service that pins its runtime with spec.runtime.autoSync:
    false gets the change once you move the pin; meanwhile RuntimeDrifted is True."""
    scenario, _ = backend.converged(replicas=1, grace=2)
    service = next((scenario.repo / "services").glob("*.yaml"))
    runtime = next((scenario.repo / "runtimes").glob("*.yaml"))
    _edit(service, lambda d: d["spec"]["runtime"].update(autoSync=False))
    scenario.until(settled)
    _edit(runtime, lambda d: d["spec"]["engineConfig"].update(
        lifecycle={"minReadySeconds": 90}))
    scenario.until(settled)
    assert scenario.replica(NAME)["spec"]["minReadySeconds"] == 0
    drifted = {c["type"]: c["status"] for c in scenario.status(NAME)["conditions"]}
    assert drifted.get("RuntimeDrifted") == "True", drifted
    _edit(service, lambda d: d["spec"]["runtime"].update(autoSync=True))  # the pin moves
    scenario.until(lambda s: s.replica(NAME)["spec"]["minReadySeconds"] == 90)
    scenario.until(settled)
    assert scenario.replica(NAME)["spec"]["minReadySeconds"] == 90


# -- 6. a surge never takes the Instance it replaces out of the available count -----------

@pytest.mark.parametrize("workers", [None, 1], ids=["single-pod", "gang"])
def test_a_surge_keeps_the_instance_it_replaces_available(backend, workers):
    """min-ready-seconds.txt: in a SurgeThenDrain rollout the old pods keep serving
    until the new ones have stayed Ready for the window; instances.txt: an Instance
    counts toward a state when at least its desired number of pods do, so it still
    counts during a surge. With maxUnavailable 0 every Instance stays available through
    the whole rollout: a new pod that is not ready yet is not required, and one that
    becomes ready does not restart the window of the pods already serving."""
    surge = {"minReadySeconds": 5, "updateStrategy": {
        "type": "SurgeThenDrain", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}
    scenario, change = backend.converged(replicas=2, workers=workers, grace=2,
                                         lifecycle=surge)
    dips: list[tuple] = []
    scenario.watches.append(lambda s: s.status(NAME)["availableReplicas"] >= 2 or dips.append(
        (s.passes, s.status(NAME)["availableReplicas"], sorted(rows(s)))))
    change(image="sglang:v2", lifecycle=surge)
    scenario.until(lambda s: settled(s) and s.status(NAME)["availableReplicas"] == 2,
                   seconds=180)
    assert not dips, dips


def test_a_failed_instance_whose_pod_comes_up_late_counts_available_after_its_window(
        tmp_path):
    """min-ready-seconds.txt: an Instance is available once its pods have been ready
    for minReadySeconds. A Failed Instance has no operation to wake the pass when its
    late pod's window ends: the status still counts it then, rather than resting on
    the count of the pass that saw the pod come up."""
    repo = write_service(tmp_path / "repo", replicas=1,
                         lifecycle={"minReadySeconds": 20, "instanceReadyTimeout": "1m"})
    s = Scenario(tmp_path, repo)
    s.run_pass()
    pod = f"{NAME}-0-default-0"
    s.fault("hang", pod=pod)
    s.until(lambda d: rows(d)[0]["phase"] == "Failed")
    s.fault("hang", pod=pod, clear=True)
    s.until(lambda d: P.containers_ready(d.pods(pod)[0]))
    assert s.status(NAME)["availableReplicas"] == 0
    s.until(lambda d: d.status(NAME)["availableReplicas"] == 1, max_passes=20)
    assert rows(s)[0]["phase"] == "Failed"
