"""The ``kube`` backend: ``KubeCluster`` on the official ``kubernetes`` client.

``open_cluster("kube")`` or ``open_cluster("kube:CONTEXT")`` returns one. The
API calls it makes, for RBAC (all namespaces unless noted):

========================================================  ===========================
path                                                      verbs
========================================================  ===========================
/api/v1/pods                                              list, watch
/api/v1/namespaces/{ns}/pods/{name}                       get, create, delete, patch,
                                                          update (replace_object)
/api/v1/namespaces/{ns}/pods/{name}/status                patch
/api/v1/services, .../services/{name}                     list, watch, get, create,
                                                          update, delete
/api/v1/events, /api/v1/namespaces/{ns}/events/{name}     list, get, create, patch
/api/v1/nodes (cluster-scoped)                            list, watch, get
/apis/policy/v1 poddisruptionbudgets                      list, watch, create,
                                                          update, delete
/apis/apps/v1 controllerrevisions                         list, watch, get, create,
                                                          update, delete
/apis/ome.io/v1beta1 inferencereplicas (+ /status)        list, watch, get, create,
                                                          update, delete; status: update
/apis/ome.io/v1beta1 inferenceservices (+ /status)        get; status: patch
/apis/scheduling.x-k8s.io/v1alpha1 podgroups (+ /status)  list, watch, get, create,
                                                          update, delete
/apis/coordination.k8s.io/v1 leases (one namespace)       get, create, update
GET /apis/{group}/{version} (discovery)                   (non-resource; allowed to
                                                          every authenticated user)
POST /apis/authorization.k8s.io/v1/                       create (allowed to every
selfsubjectaccessreviews                                  authenticated user)
========================================================  ===========================

What a reconcile run uses of these, and so what RBAC grants, is narrower:
``access.py`` lists it, and a run asks the API server about each with a
SelfSubjectAccessReview before its first write. Every LIST is read in pages
of 500 (``limit``/``continue``). Under ``--until-idle`` the kinds a pass observes
are listed once and then watched (``watches.py``); an account without ``watch``
gets a warning and a LIST of each kind per pass instead.
"""

from omegitops.cluster.kube.cluster import KubeCluster
from omegitops.cluster.kube.config import API_ENV, connect, plain_client
from omegitops.cluster.kube.rest import RetryPolicy

__all__ = ["API_ENV", "KubeCluster", "RetryPolicy", "connect", "plain_client"]
