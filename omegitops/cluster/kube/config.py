"""Building the ``ApiClient``: kubeconfig, the in-cluster service account, or a plain URL.

``OMEGITOPS_KUBE_API=http://127.0.0.1:PORT`` points the backend at an API
server without credentials or TLS: the HTTP double of the wire tests, or a
local ``kubectl proxy``. It wins over every other source, so set it only for
those.
"""

from __future__ import annotations

import os
from pathlib import Path

import urllib3
from kubernetes import config
from kubernetes.client import ApiClient, Configuration
from kubernetes.config import kube_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import SERVICE_TOKEN_FILENAME

from omegitops.cluster.kube.token import TokenFile
from omegitops.util.errors import ClusterError

API_ENV = "OMEGITOPS_KUBE_API"


def plain_client(url: str) -> ApiClient:
    """A client for ``url`` without credentials (the wire tests' double, kubectl proxy)."""
    configuration = Configuration()
    configuration.host = url.rstrip("/")
    return ApiClient(_tuned(configuration))


def connect(context: str | None, kubeconfig: str | None = None) -> ApiClient:
    """A client from ``$OMEGITOPS_KUBE_API``, else kubeconfig (``context`` or the current
    one, in ``kubeconfig`` or ``$KUBECONFIG``'s files), else the in-cluster service
    account."""
    url = os.environ.get(API_ENV)
    if url:
        return plain_client(url)
    configuration = Configuration()
    try:
        token_file = _load_kubeconfig(context, configuration, kubeconfig)
    except (ConfigException, FileNotFoundError) as err:
        if context is not None or kubeconfig is not None:
            raise ClusterError(f"kube:{context or ''}: {err}") from err
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException as incluster:
            raise ClusterError(f"kube: no kubeconfig ({err}) and not in a cluster "
                               f"({incluster})") from incluster
        token_file = Path(SERVICE_TOKEN_FILENAME)
    if token_file is not None:
        # The kubelet rotates a pod's token; a kubeconfig's tokenFile may be kept fresh
        # by another process: read it again as client-go does (token.py).
        TokenFile(token_file).install(configuration)
    return ApiClient(_tuned(configuration))


def context_namespace(context: str | None = None, kubeconfig: str | None = None) -> str:
    """The namespace kubectl would use: the kubeconfig context's (``context`` or the
    current one), else ``default``; without a kubeconfig, in a pod, the pod's own."""
    try:
        loader = kube_config._get_kube_config_loader(
            filename=_kubeconfig_files(kubeconfig), active_context=context)
    except (ConfigException, FileNotFoundError) as err:
        if context is not None or kubeconfig is not None:
            raise ClusterError(f"kube:{context or ''}: {err}") from err
        own = Path(SERVICE_TOKEN_FILENAME).with_name("namespace")
        return own.read_text().strip() if own.is_file() else "default"
    found = loader.current_context.get("context") or {}
    return str(found.get("namespace") or "default")


def _kubeconfig_files(kubeconfig: str | None) -> str:
    """``--kubeconfig``, else ``$KUBECONFIG`` (a list of files, merged as kubectl merges
    them), else ~/.kube/config: the client's default, read when it was imported."""
    return kubeconfig or kube_config.KUBE_CONFIG_DEFAULT_LOCATION


def _load_kubeconfig(context: str | None, configuration: Configuration,
                     kubeconfig: str | None = None) -> Path | None:
    """Load kubeconfig (``kubeconfig``, ``$KUBECONFIG`` or ~/.kube/config) into
    ``configuration``; the token file its user names (``tokenFile``, relative to the
    kubeconfig's folder), if any."""
    loader = kube_config._get_kube_config_loader(
        filename=_kubeconfig_files(kubeconfig), active_context=context, persist_config=True)
    loader.load_and_set(configuration)
    user = loader._user
    name = user.safe_get("tokenFile") if user is not None else None
    if not name:  # a file wins over an inline token, in client-go as here
        return None
    return Path(loader._get_base_path(user.path)) / name


def _tuned(configuration: Configuration) -> Configuration:
    # Our Rest layer retries with back-off and maps each failure; urllib3 retrying
    # underneath would multiply the waits and hide what happened.
    configuration.retries = urllib3.Retry(total=0, connect=0, read=0, redirect=0, status=0,
                                          raise_on_redirect=False, raise_on_status=False)
    return configuration
