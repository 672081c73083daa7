"""Faults injected into the simulated cluster (``omegitops sim fault``).

=============  ===========================================================  ==========
kind           effect                                                       persistent
=============  ===========================================================  ==========
crash          the pod's ome-container (else first container) exits with   yes
               code 1 now and one second after every restart:
               CrashLoopBackOff, until the fault is cleared or the pod goes
oom            that container is killed once, OOMKilled, exit code 137,     no
               and restarts normally after the back-off
imagepull      the pod's pulls fail (``--image IMG``: every pull of IMG, by  yes
               any pod, now and later): ErrImagePull, then ImagePullBackOff.
               An image already on the node is not pulled again unless the
               container's imagePullPolicy is Always
evict          the kubelet evicts the pod: phase Failed, reason Evicted,   no
               containers terminated; the pod stays until deleted
unschedulable  every node is cordoned (spec.unschedulable), so no new pod   yes
               is placed: ``0/8 nodes are available: 8 node(s) were
               unschedulable.`` Running pods stay. Clearing uncordons the
               nodes this fault cordoned
node-down      the pod's node (or ``--node``) stops reporting: pods Ready   yes
               False after 40 s, deleted by the taint manager 300 s later
               (340 s in all), then Terminating for as long as the node is
               silent: nobody confirms that their containers stopped.
               Clearing makes the node report again; its kubelet finishes
               those deletions, each with its full grace
node-removed   the pod's node (or ``--node``) is gone: it stops reporting   no
               and its Node object is deleted, as a cloud provider's node
               lifecycle controller does; 40 s later (PodGC's quarantine)
               PodGC force-deletes every pod bound to it, terminating or not
hang           the container keeps running but its readiness probe fails    yes
cordon         the pod's node (or ``--node``) is cordoned, as ``kubectl     yes
               cordon`` does: spec.unschedulable. Its pods stay; clearing
               uncordons it
taint          the pod's node (or ``--node``) gets the NoExecute taint      yes
               ``omegitops.io/maintenance=true`` (a GPU health checker's,
               say): the taint manager deletes the pods that do not
               tolerate it, the others after their tolerationSeconds;
               clearing removes it
drain          ``kubectl drain`` of the pod's node (or ``--node``): it is    yes
               cordoned and its pods evicted through the eviction API; one
               a PodDisruptionBudget refuses is tried again every 5 s until
               none is left. Clearing stops the drain and uncordons the node
=============  ===========================================================  ==========

Pod faults are kept by pod uid in the simulator's bookkeeping, so a new pod
with the same name starts healthy.

A pod on a silent node also goes at once when it is deleted with a grace of 0
(a force delete), or when the node, NotReady, gets the
``node.kubernetes.io/out-of-service`` taint (PodGC force-deletes its
terminating pods; the taint's NoExecute effect has the taint manager delete
the pods that do not tolerate it).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from omegitops.capacity import nodes
from omegitops.cluster import base
from omegitops.cluster.errors import Invalid, NotFound
from omegitops.cluster.sim.kubelet import CRASH_EXIT, OOM_EXIT, PodWorker

if TYPE_CHECKING:
    from omegitops.cluster.sim.cluster import SimCluster

EVICTION_MESSAGE = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 0."


class FaultKind(StrEnum):
    CRASH = "crash"
    OOM = "oom"
    IMAGEPULL = "imagepull"
    EVICT = "evict"
    UNSCHEDULABLE = "unschedulable"
    NODE_DOWN = "node-down"
    NODE_REMOVED = "node-removed"
    HANG = "hang"
    CORDON = "cordon"
    TAINT = "taint"
    DRAIN = "drain"


ONE_SHOT = {FaultKind.OOM, FaultKind.EVICT, FaultKind.NODE_REMOVED}
NODE_FAULTS = {FaultKind.NODE_DOWN, FaultKind.NODE_REMOVED, FaultKind.CORDON, FaultKind.TAINT,
               FaultKind.DRAIN}
MAINTENANCE_TAINT = {"key": "omegitops.io/maintenance", "value": "true", "effect": "NoExecute"}


def apply(sim: SimCluster, kind: str, *, pod: str | None, namespace: str | None,
          image: str | None, node: str | None, clear: bool) -> str:
    """Inject or clear one fault now; returns what was done, in one line."""
    try:
        fault = FaultKind(kind)
    except ValueError:
        choices = ", ".join(k.value for k in FaultKind)
        raise Invalid(f"unknown fault kind {kind!r} (one of {choices})") from None
    if clear and fault in ONE_SHOT:
        raise Invalid(f"fault {fault} happens once; there is nothing to clear")
    if fault is FaultKind.UNSCHEDULABLE:
        return _cordon_all(sim, clear)
    if fault in NODE_FAULTS and node:
        return _node_fault(sim, fault, node, clear)
    if fault is FaultKind.IMAGEPULL and image:
        return _image_unpullable(sim, image, clear)
    if not pod:
        raise Invalid(f"fault {fault} needs --pod" + (
            " or --node" if fault in NODE_FAULTS else
            " or --image" if fault is FaultKind.IMAGEPULL else ""))
    target = sim._find_pod(pod, namespace)
    if fault in NODE_FAULTS:
        node_name = target["spec"].get("nodeName")
        if not node_name:
            raise Invalid(f"Pod {pod} is not bound to a node yet")
        return _node_fault(sim, fault, node_name, clear)
    return _pod_fault(sim, target, fault, clear)


def _pod_fault(sim: SimCluster, pod: dict, fault: FaultKind, clear: bool) -> str:
    uid = pod["metadata"]["uid"]
    name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    flags = sim._sim["faults"]["pods"].setdefault(uid, {})
    rec = sim._rec(pod)
    if clear:
        flags.pop(str(fault), None)
    elif fault is not FaultKind.EVICT:
        flags[str(fault)] = True
    if not flags:
        sim._sim["faults"]["pods"].pop(uid, None)
    sim._dirty = True
    if rec["node"] is None or sim._node_down(rec["node"]):
        # The kubelet acts when it runs the pod (or when its node reports again).
        return f"{'cleared' if clear else 'injected'} {fault} on pod {name}"
    worker = sim._worker(pod, rec)
    now = sim._clock
    if fault is FaultKind.CRASH and clear:
        worker.cancel_crash()
    elif fault is FaultKind.CRASH:
        worker.crash_now(now, CRASH_EXIT)
    elif fault is FaultKind.OOM:
        worker.crash_now(now, OOM_EXIT)
    elif fault is FaultKind.HANG:
        worker.set_hung(not clear, now)
    elif fault is FaultKind.EVICT and rec["terminating"] is None and not rec["evicted"]:
        worker.evict(now, EVICTION_MESSAGE)
    sim._after_kubelet(pod, rec, worker)
    return f"{'cleared' if clear else 'injected'} {fault} on pod {name}"


def replay(worker: PodWorker, now: float) -> None:
    """Faults injected while the pod's node was silent take effect when it reports again."""
    if worker.faults.get("crash"):
        worker.crash_now(now, CRASH_EXIT)
    elif worker.faults.get("oom"):
        worker.crash_now(now, OOM_EXIT)
    if worker.faults.get("hang"):
        worker.set_hung(True, now)


def _image_unpullable(sim: SimCluster, image: str, clear: bool) -> str:
    images = sim._sim["faults"]["images"]
    if clear:
        if image in images:
            images.remove(image)
    elif image not in images:
        images.append(image)
    sim._dirty = True
    return f"{'cleared' if clear else 'injected'} imagepull on image {image}"


def _cordon_all(sim: SimCluster, clear: bool) -> str:
    cordoned = sim._sim["faults"]["cordoned"]
    for name, node in sim._objects[base.NODE].items():
        if clear and name in cordoned:
            nodes.set_cordoned(node, False)
        elif not clear and not node["spec"].get("unschedulable"):
            nodes.set_cordoned(node, True)
            cordoned.append(name)
        else:
            continue
        sim._bump(node)
    if clear:
        cordoned.clear()
    sim._sim["schedulerDirty"] = True
    return f"{'uncordoned' if clear else 'cordoned'} every node"


def _node_fault(sim: SimCluster, fault: FaultKind, name: str, clear: bool) -> str:
    if name not in sim._objects[base.NODE]:
        raise NotFound(f"Node/{name} not found")
    if fault in (FaultKind.CORDON, FaultKind.TAINT, FaultKind.DRAIN):
        return _mark_node(sim, fault, name, clear)
    if fault is FaultKind.NODE_REMOVED:
        sim._remove_node(name)
        return (f"node {name} removed; PodGC deletes its pods in {nodes.PODGC_QUARANTINE} s")
    if clear:
        sim._node_comes_back(name)
        return f"node {name} reports again"
    sim._node_goes_down(name)
    return f"node {name} stopped reporting"


def _mark_node(sim: SimCluster, fault: FaultKind, name: str, clear: bool) -> str:
    """Cordon one node, or taint it for maintenance (or undo it): it keeps reporting."""
    node = sim._objects[base.NODE][name]
    if fault in (FaultKind.CORDON, FaultKind.DRAIN):
        nodes.set_cordoned(node, not clear)
        done = "uncordoned" if clear else "cordoned"
        if fault is FaultKind.DRAIN:
            sim._sim["nodes"][name]["draining"] = None if clear else sim._clock
            done = "no longer drained" if clear else "draining"
    else:
        key = MAINTENANCE_TAINT["key"]
        taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != key]
        node["spec"]["taints"] = taints if clear else [*taints, dict(MAINTENANCE_TAINT)]
        done = f"{'untainted' if clear else 'tainted'} {key}:NoExecute"
    sim._bump(node)
    sim._sim["schedulerDirty"] = True
    sim._process_node(name)
    return f"node {name} {done}"
