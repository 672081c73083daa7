"""instances.txt: "The autoscaler, minReplicas and maxReplicas count Instances, not
pods", with the real autoscaler: kube-controller-manager's HPA controller, reading an
external metric from the test's metrics API (``tests/controlplane/metricsapi.py``,
served through the API server's aggregation layer), writes the InferenceReplica's
``/scale``; the job, pass by pass, follows the count with the documents' rules and
budgets (docs/behaviour.md "Who owns the count of Instances").

The metric is a queue length with a target of ``PER_INSTANCE`` per Instance
(``AverageValue``): the HPA asks for ceil(metric / PER_INSTANCE) Instances. The
control plane's HPA controller syncs every 2 s and scales down after a 5 s
stabilization (``controlplane.py``), so each step takes seconds. Only the control
plane has an HPA: these tests have no ``sim`` half (tests/rules/test_autoscaling.py
drives the same rules on both backends with ``Driver.scale``)."""

from __future__ import annotations

import math

import pytest

from omegitops.render import pods as P
from tests.backends import NAME, ControlPlaneBackend, rows, settled
from tests.fleet import strategy

pytestmark = pytest.mark.controlplane

SURGE = strategy("SurgeThenDrain", maxSurge=1, maxUnavailable=0)
METRIC = "queue_depth"
PER_INSTANCE = 10
HPA_API = ("autoscaling/v2", "HorizontalPodAutoscaler")
# The InferenceReplica's group, version and kind, as its CRD serves them.
TARGET = {"apiVersion": "ome.io/v1beta1", "kind": "InferenceReplica", "name": NAME}


@pytest.fixture(scope="module")
def metrics(control_plane):
    """The external metrics API, registered for this module's tests (the
    ``control_plane`` fixture has put ``tests/controlplane`` on the path)."""
    from metricsapi import ExternalMetrics

    with ExternalMetrics(control_plane) as served:
        yield served


@pytest.fixture
def cluster(control_plane, tmp_path):
    made = ControlPlaneBackend(control_plane, tmp_path)
    yield made
    made.close()


def autoscale(scenario, metrics, low: int, high: int, queue: float) -> None:
    """The queue at ``queue``, and an HPA of [low, high] on the engine's InferenceReplica,
    its behavior left to the controller's defaults (the flags of the control plane)."""
    metrics.set(scenario.namespace, METRIC, queue)
    scenario.cp.apply({
        "apiVersion": HPA_API[0], "kind": HPA_API[1],
        "metadata": {"name": NAME, "namespace": scenario.namespace},
        "spec": {"scaleTargetRef": TARGET, "minReplicas": low, "maxReplicas": high,
                 "metrics": [{"type": "External", "external": {
                     "metric": {"name": METRIC},
                     "target": {"type": "AverageValue",
                                "averageValue": str(PER_INSTANCE)}}}]}})


def hpa(scenario) -> dict:
    return scenario.cp.get(*HPA_API, scenario.namespace, NAME) or {}


def hpa_wants(replicas: int):
    """A predicate: the HPA has set ``replicas`` and the job has brought the engine to
    rest at that count."""
    def done(s) -> bool:
        status = hpa(s).get("status") or {}
        return (status.get("desiredReplicas") == replicas
                and s.replica(NAME)["spec"]["replicas"] == replicas and settled(s))
    return done


def within(low: int, high: int, seen: list[int]):
    """A watch: after every pass the count is in [low, high], and so are the Instances
    that fill places (not the ones being deleted, not a surge's new half)."""
    def check(s) -> None:
        replicas = s.replica(NAME)["spec"]["replicas"]
        seen.append(replicas)
        assert low <= replicas <= high, replicas
        filling = [r for r in rows(s).values()
                   if r["phase"] != "Deleting" and r.get("surgeOf") is None]
        assert len(filling) <= high, rows(s)
    return check


def scale_writers(scenario) -> set[str]:
    """The field managers that wrote spec.replicas through the scale subresource."""
    stored = scenario.cp.get(TARGET["apiVersion"], TARGET["kind"], scenario.namespace, NAME)
    return {entry["manager"] for entry in stored["metadata"].get("managedFields") or []
            if entry.get("subresource") == "scale"}


def live_pods(scenario) -> list[dict]:
    return [p for p in scenario.pods(f"{NAME}-")
            if not P.has_ended(p) and not P.is_terminating(p)]


def test_the_hpa_scales_instances_up_and_down_in_the_documented_order(cluster, metrics):
    """The queue grows to 3 Instances' worth: the HPA writes /scale to 3, the job builds
    Instances 1 and 2. Instance 1 stops serving (its readiness probe fails), then the
    queue falls to 2 Instances' worth: the scale-down keeps the Ready Instances, lowest
    indices first (0 and 2). The queue empties: back to minReplicas, Instance 0 kept.
    The count never leaves [1, 4]; the job never writes it back."""
    scenario, _ = cluster.converged(replicas=1, max_replicas=4, grace=2)
    seen: list[int] = []
    scenario.watches.append(within(1, 4, seen))
    autoscale(scenario, metrics, 1, 4, queue=PER_INSTANCE / 2)

    metrics.set(scenario.namespace, METRIC, 3 * PER_INSTANCE)
    scenario.until(hpa_wants(3), seconds=180)
    assert sorted(rows(scenario)) == [0, 1, 2]
    # Read through the front proxy, which names the requester (the controller-manager).
    reads = [r for r in metrics.reads(METRIC)
             if r.path.endswith(f"/namespaces/{scenario.namespace}/{METRIC}")]
    assert reads and all(r.user for r in reads), metrics.requests[-5:]
    assert any("controller-manager" in m for m in scale_writers(scenario)), \
        scale_writers(scenario)
    assert scenario.status(NAME)["replicasFrom"] == "Autoscaler"

    scenario.fault("hang", f"{NAME}-1-default-0")
    scenario.until(lambda s: s.status(NAME)["readyReplicas"] == 2)
    metrics.set(scenario.namespace, METRIC, 2 * PER_INSTANCE)
    scenario.until(hpa_wants(2), seconds=180)
    assert sorted(rows(scenario)) == [0, 2]
    assert scenario.status(NAME)["readyReplicas"] == 2

    metrics.set(scenario.namespace, METRIC, 0)
    scenario.until(hpa_wants(1), seconds=180)
    assert sorted(rows(scenario)) == [0]
    # Followed, never fought: the count went 1, 3, 2, 1 and nothing else.
    assert [n for i, n in enumerate(seen) if i == 0 or seen[i - 1] != n] == [1, 3, 2, 1]
    assert not scenario.events("ReplicasClamped")


def test_a_gang_scales_whole_under_the_hpa(cluster, metrics):
    """Each Instance a leader and two workers: the HPA's count is of Instances, the
    job creates and removes whole gangs (the per-pass invariants check every gang is
    whole), and the selector the HPA reads matches the leaders only."""
    scenario, _ = cluster.converged(replicas=1, max_replicas=3, workers=2, grace=2)
    seen: list[int] = []
    scenario.watches.append(within(1, 3, seen))
    autoscale(scenario, metrics, 1, 3, queue=0)

    metrics.set(scenario.namespace, METRIC, 2.5 * PER_INSTANCE)
    scenario.until(hpa_wants(3), seconds=240)
    assert len(live_pods(scenario)) == 3 * 3
    selector = scenario.status(NAME)["selector"]
    wanted = dict(pair.split("=") for pair in selector.split(","))
    chosen = [p for p in live_pods(scenario)
              if wanted.items() <= p["metadata"]["labels"].items()]
    assert sorted(P.runner_of(p) for p in chosen) == ["leader"] * 3

    metrics.set(scenario.namespace, METRIC, 1)
    scenario.until(hpa_wants(1), seconds=240)
    assert sorted(rows(scenario)) == [0]
    scenario.wait(lambda s: len(live_pods(s)) == 3, 60, "one whole gang left")


def test_an_hpa_wider_than_the_service_is_held_to_the_service_bounds(cluster, metrics):
    """The HPA allows 6, the service's maxReplicas is 3: the HPA writes 6, the job
    brings the count back to 3 (a ReplicasClamped event) and never builds a fourth
    Instance, however often the HPA writes 6 again."""
    scenario, _ = cluster.converged(replicas=1, max_replicas=3, grace=2)
    scenario.watches.append(within(1, 6, []))
    autoscale(scenario, metrics, 1, 6, queue=6 * PER_INSTANCE)

    def over(s) -> bool:
        return (hpa(s).get("status") or {}).get("desiredReplicas") == 6
    scenario.until(over, seconds=120)
    scenario.until(lambda s: len(rows(s)) == 3 and settled(s), seconds=180)
    for _ in range(3 * math.ceil(2 / 0.5)):  # a few of the HPA's periods
        scenario.run_pass()
        assert len([r for r in rows(scenario).values() if r["phase"] != "Deleting"]) <= 3
    assert sorted(rows(scenario)) == [0, 1, 2]
    assert any("above maxReplicas 3: set to 3" in e["message"]
               for e in scenario.events("ReplicasClamped"))


def test_an_hpa_scale_during_a_rollout_keeps_the_budgets(cluster, metrics):
    """The queue grows while a new image rolls out: the HPA's new Instances are built at
    the target revision, and maxSurge 1 / maxUnavailable 0 hold for the others after
    every pass."""
    scenario, change = cluster.converged(replicas=2, max_replicas=4, grace=2,
                                         lifecycle=SURGE)
    scenario.watches.append(within(2, 4, []))
    updating: list[int] = []

    def budget(s) -> None:
        moving = [r for r in rows(s).values()
                  if (r.get("operation") or {}).get("type") == "Update"]
        updating.append(len(moving))
        assert len(moving) <= 1, rows(s)

    scenario.watches.append(budget)
    autoscale(scenario, metrics, 2, 4, queue=2 * PER_INSTANCE)
    change(image="sglang:v2")
    scenario.run_pass()
    assert updating[-1] == 1, rows(scenario)
    # The HPA writes /scale while the rollout is under way (no pass in between).
    metrics.set(scenario.namespace, METRIC, 4 * PER_INSTANCE)
    scenario.wait(lambda s: s.replica(NAME)["spec"]["replicas"] == 4, 60,
                  "the HPA's scale to 4")
    scenario.until(hpa_wants(4), seconds=240)
    target = scenario.replica(NAME)["spec"]["revision"]
    assert sorted(rows(scenario)) == [0, 1, 2, 3]
    assert {r["revision"] for r in rows(scenario).values()} == {target}
    assert max(updating) == 1


def test_the_hpa_controller_may_read_external_metrics(control_plane, metrics):
    """The RBAC a metrics adapter installs: the HPA controller's ServiceAccount (as
    kube-controller-manager runs it with --use-service-account-credentials) may read
    external metrics in any namespace."""
    from kubernetes import client as k8s
    from metricsapi import GROUP, HPA_CONTROLLER, NAMESPACE

    review = k8s.AuthorizationV1Api(control_plane.admin).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": f"system:serviceaccount:{NAMESPACE}:{HPA_CONTROLLER}",
                 "resourceAttributes": {"group": GROUP, "resource": METRIC,
                                        "namespace": "any", "verb": "get"}}})
    assert review.status.allowed, review.status
