"""Building the ``ApiClient``: kubeconfig, the in-cluster service account, or a plain URL.

``OMEGITOPS_KUBE_API=http://127.0.0.1:PORT`` points the backend at an API
server without credentials or TLS: the HTTP double of the wire tests, or a
local ``kubectl proxy``. It wins over every other source, so set it only for
those.
"""

from __future__ import annotations

import os

import urllib3
from kubernetes import config
from kubernetes.client import ApiClient, Configuration
from kubernetes.config.config_exception import ConfigException

from omegitops.util.errors import ClusterError

API_ENV = "OMEGITOPS_KUBE_API"


def plain_client(url: str) -> ApiClient:
    """A client for ``url`` without credentials (the wire tests' double, kubectl proxy)."""
    configuration = Configuration()
    configuration.host = url.rstrip("/")
    return ApiClient(_tuned(configuration))


def connect(context: str | None) -> ApiClient:
    """A client from ``$OMEGITOPS_KUBE_API``, else kubeconfig (``context`` or the current
    one), else the in-cluster service account."""
    url = os.environ.get(API_ENV)
    if url:
        return plain_client(url)
    configuration = Configuration()
    try:
        config.load_kube_config(context=context, client_configuration=configuration)
    except (ConfigException, FileNotFoundError) as err:
        if context is not None:
            raise ClusterError(f"kube:{context}: {err}") from err
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException as incluster:
            raise ClusterError(f"kube: no kubeconfig ({err}) and not in a cluster "
                               f"({incluster})") from incluster
    return ApiClient(_tuned(configuration))


def _tuned(configuration: Configuration) -> Configuration:
    # Our Rest layer retries with back-off and maps each failure; urllib3 retrying
    # underneath would multiply the waits and hide what happened.
    configuration.retries = urllib3.Retry(total=0, connect=0, read=0, redirect=0, status=0,
                                          raise_on_redirect=False, raise_on_status=False)
    return configuration
