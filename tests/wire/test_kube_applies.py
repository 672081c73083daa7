"""A pass's plans applied side by side on the kube backend (``OMEGITOPS_APPLY_WORKERS``):
different InferenceServices' writes at the same time, each service's in its order, and
the cluster left as one plan after another leaves it."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from itertools import pairwise

import pytest
from apiserver import ApiServerDouble
from wire_helpers import EXAMPLES

from omegitops.app.passes import run_pass
from omegitops.cluster.kube import KubeCluster, RetryPolicy, plain_client
from omegitops.cluster.kube.cluster import APPLY_WORKERS, APPLY_WORKERS_ENV, apply_workers
from omegitops.cluster.sequences import SEQUENCE_ANNOTATION
from omegitops.manifests.load import load, resolved_components
from omegitops.util.errors import UsageError

WRITES = ("POST", "PUT", "PATCH", "DELETE")
KINDS = ("Pod", "InferenceReplica", "ControllerRevision", "Service", "Event")
NOW = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def items():
    return resolved_components(load(EXAMPLES))


def _passes(items, workers: int, count: int = 2, delay: float = 0.0):
    """``count`` passes from an empty cluster with ``workers``: each write as
    (namespace, the service it is for, method, path, start, end), and the objects left."""
    writes: list[tuple] = []
    lock = threading.Lock()
    with ApiServerDouble() as api:
        handle = api.handle

        def logged(method, target, content_type, body):
            start = time.monotonic()
            if method in WRITES and delay:
                time.sleep(delay)
            try:
                return handle(method, target, content_type, body)
            finally:
                if method in WRITES:
                    with lock:
                        writes.append((*_service_of(target, body), method,
                                       target.split("?")[0], start, time.monotonic()))

        api.handle = logged
        client = plain_client(api.url)
        kube = KubeCluster(api_client=client, lease=False,
                           retry=RetryPolicy(attempts=3, backoff=0.2, sleep=lambda _: None),
                           timeout=5.0)
        kube.apply_workers = workers
        kube.now = lambda: NOW  # the same moment in both runs: their objects compare
        try:
            results = [run_pass(kube, items) for _ in range(count)]
        finally:
            client.close()
        left = {kind: [_without_server_fields(o) for o in api.objects(kind)] for kind in KINDS}
    return results, writes, left


def _service_of(target: str, body: bytes) -> tuple[str, str]:
    """(namespace, InferenceService) a write is for: the label every managed object
    carries, or the object an Event is about."""
    namespace = target.split("/namespaces/")[1].split("/")[0] if "/namespaces/" in target else ""
    try:
        obj = json.loads(body or b"{}")
    except ValueError:
        obj = {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    service = labels.get("ome.io/inferenceservice") or \
        (obj.get("involvedObject") or {}).get("name") or \
        ((obj.get("spec") or {}).get("inferenceService") if isinstance(obj.get("spec"), dict)
         else None) or target.rsplit("/", 1)[-1]
    return namespace, service


def _without_server_fields(obj: dict) -> dict:
    """The object less what the API server makes up (uids, versions, times), and the
    uid in an Event's outbox sequence."""
    meta = {k: v for k, v in obj["metadata"].items()
            if k not in ("uid", "resourceVersion", "creationTimestamp", "managedFields",
                         "ownerReferences")}
    annotations = meta.get("annotations") or {}
    if SEQUENCE_ANNOTATION in annotations:
        meta["annotations"] = {**annotations, SEQUENCE_ANNOTATION:
                               annotations[SEQUENCE_ANNOTATION].rpartition("/")[2]}
    return {**obj, "metadata": meta}


def test_services_are_written_side_by_side_each_in_its_order(items):
    alone, one_by_one, left_alone = _passes(items, workers=1)
    together, side_by_side, left_together = _passes(items, workers=APPLY_WORKERS, delay=0.02)
    assert [r.errors for r in alone] == [r.errors for r in together] == [[], []]
    assert [r.applied for r in together] == [r.applied for r in alone]
    assert all(r.applied for r in alone)

    def by_service(writes):
        found: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for namespace, service, method, path, *_ in writes:
            found.setdefault((namespace, service), []).append((method, path))
        return found

    # Each service's writes in the order one plan after another makes them.
    assert by_service(side_by_side) == by_service(one_by_one)
    assert len(by_service(one_by_one)) >= 3
    # Different services' writes at the same moment.
    overlapping = {(a[:2], b[:2]) for a in side_by_side for b in side_by_side
                   if a[:2] != b[:2] and a[4] < b[5] and b[4] < a[5]}
    assert overlapping
    # And the cluster as one after another leaves it.
    assert left_together == left_alone


def test_one_worker_writes_one_request_at_a_time(items):
    _, writes, _ = _passes(items, workers=1, count=1, delay=0.01)
    spans = sorted((start, end) for *_, start, end in writes)
    assert all(end <= next_start for (_, end), (next_start, _) in pairwise(spans))


def test_the_number_of_workers_comes_from_the_environment():
    assert apply_workers({}) == APPLY_WORKERS == 5
    assert apply_workers({APPLY_WORKERS_ENV: " 1 "}) == 1
    assert apply_workers({APPLY_WORKERS_ENV: "16"}) == 16
    for wrong in ("0", "-2", "four", "65", "1.5"):
        with pytest.raises(UsageError, match=f"{APPLY_WORKERS_ENV}=.*a whole number from 1"):
            apply_workers({APPLY_WORKERS_ENV: wrong})
