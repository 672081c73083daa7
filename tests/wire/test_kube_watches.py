"""``WatchedKind`` when the server ends a watch with 410 Gone.

A real API server keeps more history than a test can outrun (its watch cache
answers even a resourceVersion etcd has compacted), so the stream here is
scripted: the lines a server sends, read by the official client's
``kubernetes.watch.Watch``. The control-plane tests (``tests/controlplane/
test_watches.py``) cover watches on the real server.
"""

from __future__ import annotations

import json
import socket
import threading
import time

from omegitops.cluster.kube.resources import RESOURCES
from omegitops.cluster.kube.watches import Changes, WatchedKind


class Stream:
    """A streamed answer holding JSON lines, as ``Rest.stream`` returns one."""

    status = 200

    def __init__(self, events: list[dict]) -> None:
        self.data = b"".join(json.dumps(e).encode() + b"\n" for e in events)

    def stream(self, amt=None, decode_content=None):
        yield self.data

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def pod(name: str, version: str, component: str = "engine") -> dict:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": version,
                         "labels": {"component": component}}}


def key_of(obj: dict) -> tuple[str, str]:
    return obj["metadata"]["namespace"], obj["metadata"]["labels"]["component"]


def test_gone_lists_again_and_counts_everything_as_changed():
    lists: list[str] = []
    versions: list[str] = []
    stop = threading.Event()

    def list_pages():
        lists.append("list")
        return [pod("a", "20"), pod("b", "21", "worker")], "21"

    def open_stream(*, resource_version="", **_):
        versions.append(resource_version)
        if len(versions) == 1:
            return Stream([{"type": "ERROR", "object": {
                "kind": "Status", "code": 410, "reason": "Expired",
                "message": "too old resource version: 5 (20)"}}])
        if len(versions) == 2:
            return Stream([{"type": "MODIFIED", "object": pod("a", "22")},
                           {"type": "BOOKMARK", "object": {"metadata": {
                               "resourceVersion": "30"}}}])
        stop.wait(5)
        return Stream([])

    changes = Changes()
    watched = WatchedKind(RESOURCES["Pod"], None, key_of, changes, list_pages, open_stream)
    watched.fill([pod("a", "5")], "5")
    watched.start()
    try:
        deadline = time.monotonic() + 10
        while len(versions) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert versions[:3] == ["5", "21", "30"]
        assert lists == ["list"]
        assert changes.take() is None  # listed again: everything may have changed
        names = {p["metadata"]["name"]: p["metadata"]["resourceVersion"]
                 for p in watched.items()}
        assert names == {"a": "22", "b": "21"}
        assert [p["metadata"]["name"] for p in watched.items([("ns", "worker")])] == ["b"]
    finally:
        stop.set()
        watched.stop()


class ClosedUnderneath(Stream):
    """A watch stream whose connection the client closed as the stream ended, a
    moment before the stop came: shutting its socket raises EBADF, as a real
    closed socket's ``shutdown`` does."""

    def __init__(self) -> None:
        super().__init__([])
        self.reading = threading.Event()
        self.ended = threading.Event()

    def stream(self, amt=None, decode_content=None):
        self.reading.set()
        self.ended.wait(10)
        yield b""

    def shutdown(self) -> None:
        self.ended.set()
        closed = socket.socket()
        closed.close()
        closed.shutdown(socket.SHUT_RD)  # OSError: [Errno 9] Bad file descriptor


def test_a_stop_after_the_stream_closed_its_connection_stops_quietly():
    # Seen at the end of a run in the shipped CronJob: the run failed with "Bad file
    # descriptor" after its passes were done.
    opened = ClosedUnderneath()
    watched = WatchedKind(RESOURCES["Pod"], None, key_of, Changes(), lambda: ([], "1"),
                          lambda **_: opened)
    watched.fill([], "1")
    watched.start()
    assert opened.reading.wait(10)
    watched.stop()
    assert not watched.running
    assert opened.ended.is_set()


def test_an_answer_older_than_the_store_does_not_replace_it():
    changes = Changes()
    watched = WatchedKind(RESOURCES["Pod"], None, key_of, changes, lambda: ([], "1"),
                          lambda **_: Stream([]))
    watched.fill([pod("a", "40")], "40")
    watched.remember(pod("a", "39"))
    assert watched.items()[0]["metadata"]["resourceVersion"] == "40"
    watched.remember(pod("a", "41", "worker"))
    assert watched.items([("ns", "engine")]) == []
    assert watched.items([("ns", "worker")])[0]["metadata"]["resourceVersion"] == "41"
    watched.forget("ns", "a")
    assert watched.items() == []


def test_a_write_answered_after_the_watch_saw_the_object_deleted_is_not_brought_back():
    """A pod's DELETE answer (the object, with its deletionTimestamp) can reach the run
    after the watch has delivered the pod's DELETED event, on a loaded machine: the
    answer is older than what the watch has seen, and storing it would keep a pod that no
    longer exists, which the run would then wait on to be gone until its time runs out."""
    changes = Changes()
    watched = WatchedKind(RESOURCES["Pod"], None, key_of, changes, lambda: ([], "1"),
                          lambda **_: Stream([]))
    watched.fill([pod("a", "40")], "40")
    terminating = pod("a", "41")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    watched._apply("MODIFIED", terminating)
    watched._apply("DELETED", pod("a", "42"))
    watched.remember(terminating)  # the DELETE's answer, late
    assert watched.items() == []
    # An answer newer than all the watch has seen is the newest there is: kept.
    watched.remember(pod("b", "43"))
    assert [p["metadata"]["name"] for p in watched.items()] == ["b"]
