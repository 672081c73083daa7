"""One scenario, two backends: a scenario written once against a ``Driver`` runs on the
simulated cluster and on the real control plane (the ``backend`` fixture of
``tests/conftest.py``, parametrised ``sim`` and ``controlplane``).

- ``sim``: ``tests/scenario.py``'s ``Scenario``. Nothing happens between two passes
  unless the clock moves: ``advance(seconds)`` jumps it, and ``until`` moves it to the
  next change after each pass.
- ``controlplane``: ``tests/controlplane/kubescenario.py``'s ``KubeScenario`` on the
  session's control plane (the ``control_plane`` fixture), each pass as the job's
  ServiceAccount in a namespace of the scenario's own. KWOK moves the pods on the wall
  clock: ``advance(seconds)`` sleeps, and ``until`` gives up after ``seconds``.

On both, the invariants of ``tests/scenario.py`` are checked after every pass, and the
rows read are those ``decode_rows`` returns, as stored.
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime
from pathlib import Path

from omegitops.app.passes import PassResult
from omegitops.render import pods as P
from tests.fleet import write_service
from tests.scenario import Scenario, converged

NAME = "svc-engine"


# -- readings the scenarios share --------------------------------------------------------

def rows(s) -> dict[int, dict]:
    """``{index: row}`` of the engine's Instances."""
    return {row["index"]: row for row in s.rows(NAME)}


def step(s, index: int = 0) -> str | None:
    return (rows(s).get(index, {}).get("operation") or {}).get("step")


def messages(s, reason: str) -> list[str]:
    return [e["message"] for e in s.events(reason)]


def settled(s) -> bool:
    """Every Instance Ready at the current revision with no operation, after a pass that
    has nothing left to do."""
    replica = s.replica(NAME)
    found = s.rows(NAME)
    return (len(found) == replica["spec"]["replicas"]
            and all(r["phase"] == "Ready" and not r.get("operation")
                    and r["revision"] == replica["spec"]["revision"] for r in found)
            and not s.results[-1].busy)


def serving_gangs(s) -> int:
    """Instances whose leader is Ready and in rotation: what the Service routes to."""
    return sum(1 for p in s.pods(f"{NAME}-")
               if P.runner_of(p) == "leader" and P.is_ready(p) and P.gate_set(p)
               and not P.has_ended(p))


# -- the driver --------------------------------------------------------------------------

class Driver:
    """A scenario on either backend. Reading (``rows``, ``replica``, ``status``, ``pods``,
    ``events``, ``passes``, ``results``, ``repo``) goes to the helper underneath; the
    checks in ``watches`` and the predicates of ``until`` are given the driver."""

    simulated: bool

    def __init__(self, inner, namespace: str):
        self.inner = inner
        self.namespace = namespace
        # Checks a test adds, run after every pass like the invariants.
        self.watches: list = []
        inner.watches.append(self._watch)

    def _watch(self, _inner) -> None:
        for watch in self.watches:
            watch(self)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def run_pass(self, kill_after: int | None = None) -> PassResult:
        """One pass; ``kill_after`` kills it after that many writes."""
        return self.inner.run_pass(kill_after=kill_after)

    def fault(self, kind: str, pod: str | None = None, clear: bool = False,
              image: str | None = None) -> None:
        """A fault of ``Scenario.fault`` (``KubeScenario.fault`` on the control plane).
        ``image``: every pull of that image fails; on the control plane KWOK fails
        every image named ``unpullable`` already, so only such a name is allowed."""
        if image is not None and not self.simulated:
            assert kind == "imagepull" and "unpullable" in image, (kind, image)
            return
        if image is not None:
            self.inner.fault(kind, pod=pod, clear=clear, image=image)
            return
        self.inner.fault(kind, pod=pod, clear=clear)

    def until(self, predicate, seconds: float = 120) -> PassResult:
        """Passes until ``predicate(self)`` holds after one."""
        raise NotImplementedError

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` go by."""
        raise NotImplementedError

    def wait(self, condition, seconds: float = 30, what: str = "the condition") -> None:
        """Until ``condition(self)`` holds, without a pass."""
        raise NotImplementedError

    def now(self) -> datetime:
        raise NotImplementedError

    def lift_gate(self, pod: str) -> None:
        """Take the scheduling gates off ``pod``, as Kueue does when it admits it."""
        raise NotImplementedError

    def scale(self, replicas: int, name: str = NAME) -> None:
        """Set the InferenceReplica's spec.replicas as ``kubectl scale irep`` (or an HPA)
        does: through the scale subresource on the control plane."""
        raise NotImplementedError

    def cluster(self):
        """The scenario's cluster, as a person running a command reaches it (the
        admin's credentials, no Lease)."""
        raise NotImplementedError


class SimDriver(Driver):
    simulated = True

    def until(self, predicate, seconds: float = 120) -> PassResult:
        # The clock moves to each next change: ``seconds`` of the wall clock mean nothing.
        return self.inner.until(lambda _: predicate(self))

    def advance(self, seconds: float) -> None:
        self.inner.advance(seconds)

    def wait(self, condition, seconds: float = 30, what: str = "the condition") -> None:
        # Nothing happens between two passes unless the clock moves: at once or never.
        assert condition(self), f"{what} does not hold"

    def now(self) -> datetime:
        return self.inner.now()

    def cluster(self):
        from omegitops.cluster.sim import SimCluster

        return SimCluster(self.inner.path)

    def lift_gate(self, pod: str) -> None:
        with self.cluster() as cluster:
            body = cluster.get_object("Pod", self.namespace, pod)
            body["spec"]["schedulingGates"] = []
            cluster.replace_object(body)

    def scale(self, replicas: int, name: str = NAME) -> None:
        # The simulated API server has no subresources: the count is the object's field.
        with self.cluster() as cluster:
            body = cluster.get_object("InferenceReplica", self.namespace, name)
            body["spec"]["replicas"] = replicas
            cluster.replace_object(body)


class KubeDriver(Driver):
    simulated = False

    def until(self, predicate, seconds: float = 120) -> PassResult:
        return self.inner.until(lambda _: predicate(self), seconds)

    def advance(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, condition, seconds: float = 30, what: str = "the condition") -> None:
        deadline = time.monotonic() + seconds
        while not condition(self):
            assert time.monotonic() < deadline, f"{what} does not hold after {seconds} s"
            time.sleep(0.2)

    def now(self) -> datetime:
        return datetime.now(UTC)

    def cluster(self):
        from omegitops.cluster.kube import KubeCluster

        return KubeCluster(api_client=self.inner.cp.admin, lease=False)

    def lift_gate(self, pod: str) -> None:
        from omegitops.cluster.base import POD
        from omegitops.cluster.kube.resources import RESOURCES
        from omegitops.cluster.kube.rest import MERGE_PATCH

        self.cluster().rest.request("PATCH", RESOURCES[POD].path(self.namespace, pod),
                                    what="admit", body={"spec": {"schedulingGates": None}},
                                    content_type=MERGE_PATCH)

    def scale(self, replicas: int, name: str = NAME) -> None:
        from omegitops.cluster.base import INFERENCE_REPLICA
        from omegitops.cluster.kube.resources import RESOURCES
        from omegitops.cluster.kube.rest import MERGE_PATCH

        # What ``kubectl scale`` and the HPA controller write: the scale subresource.
        admin = self.cluster()
        path = RESOURCES[INFERENCE_REPLICA].path(self.namespace, name, "scale")
        admin.rest.request("PATCH", path, what="scale", body={"spec": {"replicas": replicas}},
                           content_type=MERGE_PATCH)


# -- the backends ------------------------------------------------------------------------

class SimBackend:
    """Scenarios on the simulated cluster, each in a folder of its own under ``tmp_path``."""

    name = "sim"
    simulated = True

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self._folders = itertools.count()

    def _folder(self) -> Path:
        folder = self.tmp_path / f"sim-{next(self._folders)}"
        folder.mkdir()
        return folder

    def scenario(self, **service) -> SimDriver:
        """A one-service repository (``tests.fleet.write_service``), not yet reconciled."""
        folder = self._folder()
        repo = write_service(folder / "repo", **service)
        return SimDriver(Scenario(folder, repo), "demo")

    def converged(self, **service):
        """``tests.scenario.converged``: the service brought to rest, and a
        ``change(**more)`` that rewrites it."""
        scenario, change = converged(self._folder(), **service)
        return SimDriver(scenario, "demo"), change

    def close(self) -> None:
        pass


_namespaces = itertools.count()


class ControlPlaneBackend:
    """Scenarios on the session's control plane, each in a namespace of its own, deleted
    (with any node a scenario removed given back) at ``close``."""

    name = "controlplane"
    simulated = False

    def __init__(self, control_plane, tmp_path: Path):
        self.cp = control_plane
        self.tmp_path = tmp_path
        self.made: list = []

    def scenario(self, **service) -> KubeDriver:
        """A one-service repository (``tests.fleet.write_service``), not yet reconciled."""
        from tests.controlplane.kubescenario import KubeScenario

        namespace = f"rule-{next(_namespaces)}"
        repo = write_service(self.tmp_path / f"repo-{namespace}", namespace=namespace,
                             **service)
        inner = KubeScenario(self.cp, repo, {namespace})
        self.made.append(inner)
        return KubeDriver(inner, namespace)

    def converged(self, **service):
        """The service brought to rest (``settled``), and a ``change(**more)`` that
        rewrites it, as ``tests.scenario.converged`` does on sim:."""
        scenario = self.scenario(**service)
        scenario.until(settled)

        def change(**more):
            write_service(scenario.repo, namespace=scenario.namespace, **{**service, **more})

        return scenario, change

    def close(self) -> None:
        for inner in self.made:
            inner.cleanup()
