"""The job's token is read again from its file, as a pod's projected token is rotated.

The kubelet renews a pod's service-account token before it expires, and a kubeconfig's
``tokenFile`` may be kept fresh the same way; a run that kept its first token would
be refused with 401 once that token expired or was revoked. Here the token is bound
to a Secret, so that deleting the Secret revokes it at once, as an expiry would.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request

from conftest import JOB_NAMESPACE
from kubernetes import client as k8s
from kubernetes.config import kube_config

from omegitops.cluster.kube.config import connect
from omegitops.cluster.kube.rest import Rest, RetryPolicy

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
REVIEW_BODY = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
JOB_USER = f"system:serviceaccount:{JOB_NAMESPACE}:omegitops"


def _status_with(cp, token: str) -> int:
    """The API server's answer to a token alone: 201, or 401 once it is revoked."""
    context = ssl.create_default_context(cafile=str(cp.pki / "ca.crt"))
    request = urllib.request.Request(
        cp.url + REVIEW, data=json.dumps(REVIEW_BODY).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


def test_a_token_rotated_and_revoked_mid_run_is_read_again_from_its_file(
        control_plane, tmp_path, monkeypatch):
    cp = control_plane
    core = k8s.CoreV1Api(cp.admin)
    core.create_namespaced_secret(JOB_NAMESPACE, {"metadata": {"name": "first-token"}})
    token_file = tmp_path / "token"
    first = cp.write_service_account_token(token_file, JOB_NAMESPACE, "omegitops",
                                           bound_secret="first-token")
    kubeconfig = cp._write_kubeconfig(tmp_path / "kubeconfig", user=JOB_USER,
                                      token_file=token_file, namespace=JOB_NAMESPACE)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    client = connect(None)
    try:
        rest = Rest(client, retry=RetryPolicy(sleep=lambda _: None))
        review = rest.request("POST", REVIEW, what="a SelfSubjectReview", body=REVIEW_BODY)
        assert review["status"]["userInfo"]["username"] == JOB_USER

        # Rotated, then the first token revoked: well within the minute the client
        # would otherwise keep using it.
        second = cp.write_service_account_token(token_file, JOB_NAMESPACE, "omegitops")
        core.delete_namespaced_secret("first-token", JOB_NAMESPACE)
        deadline = time.monotonic() + 60
        while _status_with(cp, first) != 401:
            assert time.monotonic() < deadline, "the API server kept accepting the token"
            time.sleep(0.5)
        assert _status_with(cp, second) == 201

        review = rest.request("POST", REVIEW, what="a SelfSubjectReview", body=REVIEW_BODY)
        assert review["status"]["userInfo"]["username"] == JOB_USER
        assert client.configuration.api_key["BearerToken"] == f"Bearer {second}"
    finally:
        client.close()
