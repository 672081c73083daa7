"""A bearer token read from a file, read again as the file changes.

A pod's service-account token is a projected volume that the kubelet rotates (by
default at 80% of its life, an hour), and a kubeconfig's ``tokenFile`` may name a
file another process keeps fresh. client-go reads such a file again every minute
(``transport.NewCachedFileTokenSource``); a long run that kept the first token
would be refused with 401 once it expired. ``TokenFile`` does what client-go does,
and more: after a 401 the request layer asks it to read the file at once
(``expire``), so a token rotated and revoked in the same minute costs one retry,
not a failed pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from kubernetes.client import Configuration

# How long a token read from its file is used before the file is read again
# (client-go's cached file token source: one minute).
PERIOD = 60.0
KEY = "BearerToken"


class TokenFile:
    """The ``refresh_api_key_hook`` of a client configuration whose token is a file."""

    def __init__(self, path: str | Path, *, period: float = PERIOD,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.period = period
        self.clock = clock
        self._lock = threading.Lock()  # the watch threads send requests too
        self._read_at: float | None = None
        self._token: str | None = None

    def install(self, configuration: Configuration) -> None:
        """Read the token now, and again before a request once the period is over."""
        self(configuration)
        configuration.refresh_api_key_hook = self  # type: ignore[assignment]

    def expire(self) -> bool:
        """Read the file again before the next request (the server refused the token).
        False when the file holds the token already in use: nothing new to try."""
        with self._lock:
            current = self._read()
            if current is None or current == self._token:
                return False
            self._read_at = None
            return True

    def __call__(self, configuration: Configuration) -> None:
        with self._lock:
            now = self.clock()
            if self._read_at is not None and now - self._read_at < self.period:
                return
            token = self._read()
            self._read_at = now
            if token:  # an unreadable or empty file keeps the last token: the server says
                self._token = token
                configuration.api_key[KEY] = f"Bearer {token}"

    def _read(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8").strip() or None
        except (OSError, UnicodeDecodeError):
            return None
