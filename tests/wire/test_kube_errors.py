"""How KubeCluster meets failures: what is retried, with what back-off, and what it raises."""

from __future__ import annotations

import pytest
from wire_helpers import NS, make_pod

from omegitops.cluster.errors import Conflict, Forbidden, Invalid, NotFound, Transient
from omegitops.cluster.kube import KubeCluster, RetryPolicy, plain_client
from omegitops.util.errors import ClusterError

PODS = r"^/api/v1/pods$"


def test_a_500_is_retried_with_doubling_back_off_then_succeeds(kube, api, sleeps):
    api.fail("GET", PODS, status=500, times=2)
    assert kube.list_pods() == []
    assert len(api.calls("list")) == 3
    assert sleeps == [0.2, 0.4]


@pytest.mark.parametrize("status", [429, 503, 504])
def test_throttling_and_unavailability_are_retried(kube, api, sleeps, status):
    api.fail("GET", PODS, status=status, times=1)
    assert kube.list_pods() == []
    assert sleeps == [0.2]


def test_a_429_waits_as_long_as_its_retry_after_asks(kube, api, sleeps):
    """The API server answers 429 with Retry-After: 1 while a kind's watch cache starts
    (the first LISTs after a restart, side by side): the retry waits that long."""
    api.fail("GET", r"^/api/v1/pods$", status=429, times=2, retry_after=1)
    assert kube.list_pods() == []
    assert sleeps == [1.0, 2.0]  # then doubling, as from any first wait
    api.fail("GET", r"^/api/v1/pods$", status=429, retry_after=3600)
    kube.list_pods()
    assert sleeps[2:] == [10.0]  # never longer than MAX_RETRY_AFTER


def test_a_500_forever_becomes_transient_after_three_tries(kube, api, sleeps):
    api.fail("GET", PODS, status=500, times=100)
    with pytest.raises(Transient, match="Pod list: .*HTTP 500") as caught:
        kube.list_pods()
    assert caught.value.__cause__ is not None
    assert len(api.calls("list")) == 3 and sleeps == [0.2, 0.4]


def test_a_timeout_is_retried(api, sleeps):
    client = plain_client(api.url)
    kube = KubeCluster(api_client=client, lease=False, timeout=0.2,
                       retry=RetryPolicy(sleep=sleeps.append))
    api.fail("GET", PODS, delay=0.5, times=1)
    assert kube.list_pods() == []
    assert len(sleeps) == 1
    api.fail("GET", PODS, delay=0.5, times=3)
    with pytest.raises(Transient, match="Pod list: .*(Timeout|timed out)"):
        kube.list_pods()
    client.close()


def test_a_dropped_connection_is_retried(kube, api, sleeps):
    api.fail("POST", r"/pods$", drop=True, times=1)
    kube.create_pod(make_pod("a"))
    assert len(api.calls("create")) == 2 and sleeps == [0.2]


def test_an_unreachable_server_is_transient(sleeps):
    client = plain_client("http://127.0.0.1:9")  # the discard port: nothing listens
    kube = KubeCluster(api_client=client, lease=False, retry=RetryPolicy(sleep=sleeps.append))
    with pytest.raises(Transient, match="(?i)refused|NewConnectionError"):
        kube.list_pods()
    assert len(sleeps) == 2
    client.close()


def test_conflicts_not_found_and_invalid_are_not_retried(kube, api, sleeps):
    api.fail("PUT", r"/pods/a$", status=409, reason="Conflict", times=1)
    pod = kube.create_pod(make_pod("a"))
    with pytest.raises(Conflict, match=f"Pod/{NS}/a"):
        kube.replace_object(pod)
    with pytest.raises(NotFound, match=f"Pod/{NS}/b"):
        kube.patch_pod_images(NS, "b", {"main": "x"})
    api.fail("POST", r"/pods$", status=422, reason="Invalid", times=1)
    with pytest.raises(Invalid, match=f"Pod/{NS}/c"):
        kube.create_pod(make_pod("c"))
    assert sleeps == [] and len(api.calls("create")) == 2


def test_forbidden_names_the_missing_permission_in_one_line(kube, api, sleeps):
    api.deny("list", "pods")
    api.deny("patch", "pods", "status")
    api.fail("GET", PODS, status=403, reason="Forbidden", times=1)
    with pytest.raises(Forbidden) as caught:
        kube.list_pods()
    assert str(caught.value) == (
        "Pod list: forbidden: list core/pods in all namespaces is not granted to this "
        "account (HTTP 403; pipelines/common/rbac.yaml grants what omegitops needs)")
    kube.create_pod(make_pod("a"))
    api.fail("PATCH", r"/pods/a/status$", status=403, reason="Forbidden", times=1)
    with pytest.raises(Forbidden, match=f"^Pod/{NS}/a: forbidden: patch core/pods/status in "
                                        f"namespace {NS} is not granted") as caught:
        kube.set_pod_condition(NS, "a", "ome.io/serving", True)
    assert "\n" not in str(caught.value)
    assert sleeps == []  # never retried
    assert len(api.calls(path="selfsubjectaccessreviews")) == 2  # each confirmed by a review


def test_a_403_no_review_confirms_is_tried_again_not_called_missing_rbac(kube, api, sleeps):
    """A restarting kube-apiserver answers 403, in RBAC's words, for a second or two before
    its authorizer has read the roles (measured on the control plane). A review that grants
    the permission (or cannot be asked) makes it a passing fault: tried again, and after
    the retries Transient, which the next pass carries on from; never missing RBAC."""
    api.fail("GET", PODS, status=403, reason="Forbidden", times=1)
    assert kube.list_pods() == []
    assert len(sleeps) == 1
    api.fail("GET", PODS, status=403, reason="Forbidden", times=10)
    api.fail("POST", "selfsubjectaccessreviews", status=403, reason="Forbidden", times=1)
    with pytest.raises(Transient) as caught:
        kube.list_pods()
    assert "not taken for missing RBAC" in str(caught.value)
    assert "no SelfSubjectAccessReview denies list core/pods in all namespaces" in str(
        caught.value)


def test_an_unknown_kind_is_refused_before_any_call(kube, api):
    with pytest.raises(Invalid, match="Gadget"):
        kube.create_object({"apiVersion": "v1", "kind": "Gadget", "metadata": {"name": "x"}})
    assert list(api.requests) == []


def test_a_quota_refusal_is_the_api_servers_words_not_missing_rbac(kube, api, sleeps):
    """A 403 that is not RBAC's (a ResourceQuota, a LimitRange, Pod Security) was called
    a permission missing from this account; it is an admission refusal, with the API
    server's own message, and never retried."""
    from omegitops.cluster.errors import AdmissionRefused

    quota = ('pods "a" is forbidden: exceeded quota: pods, requested: pods=1, used: '
             'pods=1, limited: pods=1')
    api.fail("POST", r"/pods$", status=403, reason="Forbidden", message=quota)
    with pytest.raises(AdmissionRefused) as caught:
        kube.create_pod(make_pod("a"))
    assert "exceeded quota" in str(caught.value) and "not granted" not in str(caught.value)
    assert sleeps == []


def test_an_answer_that_is_not_json_is_a_cluster_error_naming_it_not_a_traceback(
        kube, api, sleeps):
    """A proxy in front of the API server may answer 200 with a page of its own (a
    sign-in form): one error naming the request and the answer's start, not retried."""
    api.fail("GET", PODS, body=b"<html><body>Sign in to continue</body></html>")
    with pytest.raises(ClusterError) as err:
        kube.list_pods()
    assert not isinstance(err.value, Transient)
    message = str(err.value)
    assert "GET /api/v1/pods: the HTTP 200 answer is not JSON (" in message
    assert "'<html><body>Sign in to continue</body></html>'" in message
    assert len(message.splitlines()) == 1
    assert len(api.calls("list")) == 1 and sleeps == []
    assert kube.list_pods() == []  # the next answer is the API server's own
