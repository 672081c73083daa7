"""The simulated cluster behind ``--cluster sim:PATH``.

Modules: ``store`` (file shape, lock, atomic save), ``cluster`` (the ``Cluster``
API and the event loop), ``scheduler``, ``kubelet`` (container state machines),
``podstatus`` (records -> Kubernetes status), ``nodes`` (node shape and node
loss), ``faults``, ``timeline`` (next-transition heap).

Choices where Kubernetes offers several behaviours:

- node loss: Ready False at 40 s; the taint manager then *deletes* the pods
  (deletionTimestamp + their grace) 300 s after the unreachable taint, so
  340 s after the node went silent; they are removed when the grace ends,
  since no kubelet can confirm (as PodGC does for out-of-service nodes).
  Pods are never turned Failed/Evicted by node loss; that is the ``evict`` fault.
- the ``unschedulable`` fault cordons every node; clearing it uncordons them.
- a pod is bound by the next ``advance`` after it is created (``advance(0)``
  is enough); API writes (delete, image patch, conditions, faults) act at once.
"""

from omegitops.cluster.sim.cluster import SimCluster
from omegitops.cluster.sim.faults import FaultKind

__all__ = ["FaultKind", "SimCluster"]
