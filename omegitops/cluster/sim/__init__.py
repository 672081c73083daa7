"""The simulated cluster behind ``--cluster sim:PATH``.

Modules: ``store`` (file shape, lock, atomic save), ``cluster`` (the ``Cluster``
API and the event loop), ``scheduler``, ``kubelet`` (container state machines),
``podstatus`` (records -> Kubernetes status), ``nodes`` (node shape and node
loss), ``faults``, ``timeline`` (next-transition heap).

Choices where Kubernetes offers several behaviours:

- node loss: Ready False at 40 s; the taint manager then *deletes* the pods
  (deletionTimestamp + their grace) 300 s after the unreachable taint, so
  340 s after the node went silent. As on a real API server they then stay,
  Terminating, while the node is silent, since no kubelet confirms that they
  stopped: they go when the node reports again, when they are force-deleted
  (grace 0), when the NotReady node is tainted out-of-service, or 40 s (PodGC's
  quarantine; a real PodGC, looking every 20 s, takes 40-60 s) after the Node
  object is deleted (the ``node-removed`` fault).
  Pods are never turned Failed/Evicted by node loss; that is the ``evict`` fault.
- the ``unschedulable`` fault cordons every node; clearing it uncordons them.
- a pod is bound by the next ``advance`` after it is created (``advance(0)``
  is enough); API writes (delete, image patch, conditions, faults) act at once.
"""

from omegitops.cluster.sim.cluster import SimCluster
from omegitops.cluster.sim.faults import FaultKind

__all__ = ["FaultKind", "SimCluster"]
