"""The simulated kubelet: each container of a bound pod as a small timed state machine.

Container phases (sim bookkeeping, rendered to Kubernetes status by ``podstatus``)::

    waiting ─► pulling ─► running ─┬─► crashed ─(back-off)─► running ...
                 │   ▲             ├─► completed          (init containers, after 5 s)
                 ▼   │             └─► stopped            (pod deletion or eviction)
              pullFailed (ErrImagePull, then ImagePullBackOff until the back-off ends)

Every phase that ends by itself has ``until``; ``PodWorker.next_time`` gives the
pod's next transition so that the clock can jump straight to it. Everything is
a function of the records and the time passed in: no clock, no randomness.

Timing, as a real kubelet (and documented defaults of this simulator):

- an image not yet on the node takes ``pullSeconds`` (20 s) to pull; pods that
  need an image already being pulled wait for that pull; after it, 0 s. Images
  are pulled in parallel, containers start as soon as their image is there;
- init containers run one after another, 5 s each, before the containers;
- a container is ready ``startup_delay`` after it starts: its startupProbe's
  initialDelaySeconds + periodSeconds, else its readinessProbe's, else 5 s; the
  pod annotation ``sim.omegitops.io/startup-seconds`` overrides it;
- a crashed container restarts after a back-off of 10 s doubling to 300 s,
  reset to 10 s when it had run for 10 minutes; a failed pull retries on the
  same back-off; restartPolicy Always is assumed;
- on deletion a container runs its preStop hook (5 s, or the annotation
  ``sim.omegitops.io/prestop-seconds``), then takes 2 s to exit on SIGTERM (or
  ``sim.omegitops.io/exit-seconds``); one still running at the deletion
  deadline is killed (exit code 137).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

# Phases of a container record.
WAITING, PULLING, PULL_FAILED, RUNNING = "waiting", "pulling", "pullFailed", "running"
CRASHED, COMPLETED, STOPPED = "crashed", "completed", "stopped"
DONE = (COMPLETED, STOPPED)

INIT_RUN_SECONDS = 5
DEFAULT_STARTUP_SECONDS = 5
DEFAULT_PROBE_PERIOD = 10
CRASH_RUN_SECONDS = 1  # how long a faulted container runs before it dies
BACKOFF_INITIAL, BACKOFF_MAX, BACKOFF_RESET_AFTER = 10, 300, 600
DEFAULT_PRESTOP_SECONDS = 5
DEFAULT_EXIT_SECONDS = 2

STARTUP_ANNOTATION = "sim.omegitops.io/startup-seconds"
PRESTOP_ANNOTATION = "sim.omegitops.io/prestop-seconds"
EXIT_ANNOTATION = "sim.omegitops.io/exit-seconds"

CRASH_EXIT = {"reason": "Error", "exitCode": 1}
OOM_EXIT = {"reason": "OOMKilled", "exitCode": 137}
KILLED_EXIT = {"reason": "Error", "exitCode": 137}
GRACEFUL_EXIT = {"reason": "Completed", "exitCode": 0}
UNKNOWN_EXIT = {
    "reason": "ContainerStatusUnknown",
    "exitCode": 137,
    "message": "The container could not be located when the pod was terminated",
}

MAIN_CONTAINER = "ome-container"


def new_container(name: str, image: str) -> dict:
    """The record of a container that has not started yet."""
    return {
        "name": name, "image": image, "phase": WAITING, "since": None, "until": None,
        "startupAt": None, "readyAt": None, "dies": None, "exit": None, "last": None,
        "restarts": 0, "backoff": 0, "pullBackoff": 0, "everStarted": False,
        "stopping": False, "stopAt": None,
    }


def new_pod_record(pod: dict, requests: dict[str, int]) -> dict:
    spec = pod["spec"]
    return {
        "node": None, "tried": False, "message": "", "ip": None, "startTime": None,
        "init": 0,
        "inits": [new_container(c["name"], c["image"]) for c in spec.get("initContainers") or []],
        "containers": [new_container(c["name"], c["image"]) for c in spec["containers"]],
        "terminating": None, "deadline": None, "evicted": None, "next": None,
        "requests": requests,
    }


def next_backoff(previous: float, ran_for: float = 0) -> float:
    """The kubelet's restart back-off: 10 s, doubling to 300 s, reset after 10 min of running."""
    if not previous or ran_for >= BACKOFF_RESET_AFTER:
        return BACKOFF_INITIAL
    return min(previous * 2, BACKOFF_MAX)


def target_container(pod: dict) -> str:
    """The container faults hit: ``ome-container`` if the pod has one, else the first."""
    names = [c["name"] for c in pod["spec"]["containers"]]
    return MAIN_CONTAINER if MAIN_CONTAINER in names else names[0]


def pull_policy(container: dict) -> str:
    """imagePullPolicy as the API server defaults it: Always for ``:latest`` or no tag."""
    if container.get("imagePullPolicy"):
        return container["imagePullPolicy"]
    image = container.get("image", "")
    if "@" in image:
        return "IfNotPresent"
    tag = image.rsplit("/", 1)[-1].partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _annotation_seconds(pod: dict, key: str) -> float | None:
    value = (pod["metadata"].get("annotations") or {}).get(key)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _probe_delay(probe: dict) -> float:
    return float(probe.get("initialDelaySeconds", 0)) + float(
        probe.get("periodSeconds", DEFAULT_PROBE_PERIOD)
    )


def startup_delay(pod: dict, container: dict) -> float:
    """Seconds from start to ready: annotation, else startupProbe, else readinessProbe, else 5."""
    override = _annotation_seconds(pod, STARTUP_ANNOTATION)
    if override is not None:
        return override
    for probe in ("startupProbe", "readinessProbe"):
        if container.get(probe):
            return _probe_delay(container[probe])
    return DEFAULT_STARTUP_SECONDS


def readiness_period(container: dict) -> float:
    """How soon a recovered container is seen ready again: its next readiness probe."""
    probe = container.get("readinessProbe")
    return float(probe.get("periodSeconds", DEFAULT_PROBE_PERIOD)) if probe else 0


@dataclass
class Host:
    """What a node's kubelet holds besides its pods: its image cache and global faults."""

    images: dict[str, float]  # image -> when its pull finishes (cached once that has passed)
    unpullable: set[str]
    pull_seconds: float


class PodWorker:
    """Moves one bound pod's containers through time, as a kubelet pod worker does.

    ``faults`` is the pod's own fault flags (crash, oom, hang, imagepull); the
    worker consumes the one-shot ``oom`` when it fires.
    """

    def __init__(self, pod: dict, record: dict, host: Host, faults: dict) -> None:
        self.pod = pod
        self.rec = record
        self.host = host
        self.faults = faults
        self.specs = {c["name"]: c for c in pod["spec"]["containers"]}
        self.init_specs = {c["name"]: c for c in pod["spec"].get("initContainers") or []}
        self.target = target_container(pod)

    # -- driving ------------------------------------------------------------

    def start(self, t: float) -> None:
        """The pod was just bound: begin its first init container, or its containers."""
        self.rec["startTime"] = t
        if self.rec["inits"]:
            self._begin_pull(self.rec["inits"][0], t)
        else:
            self._start_containers(t)

    def sync(self, now: float) -> None:
        """Fire every transition due by ``now``, earliest first."""
        while True:
            due = [
                (c["until"], i, c) for i, c in enumerate(self._all()) if c["until"] is not None
                and c["until"] <= now
            ]
            if not due:
                return
            t, _, container = min(due, key=lambda item: (item[0], item[1]))
            self._fire(container, t)

    def next_time(self, now: float) -> float | None:
        """When this pod's status next changes by itself; None if never."""
        times = []
        for c in self._all():
            times.append(c["until"])
            if c["phase"] == RUNNING:
                times += [c["startupAt"], c["readyAt"]]
            elif c["phase"] == PULL_FAILED:
                times.append(c["since"] + 1)  # ErrImagePull turns into ImagePullBackOff
        future = [t for t in times if t is not None and t > now]
        return min(future) if future else None

    def finished(self) -> bool:
        """Every container has ended (after deletion or eviction)."""
        return all(c["phase"] in DONE for c in self._all())

    # -- API-driven changes -------------------------------------------------

    def terminate(self, t: float, deadline: float) -> None:
        """Graceful deletion, or a shorter deadline for one already under way."""
        self.rec["terminating"] = self.rec["terminating"] or t
        self.rec["deadline"] = deadline
        prestop = _annotation_seconds(self.pod, PRESTOP_ANNOTATION)
        exit_seconds = _annotation_seconds(self.pod, EXIT_ANNOTATION)
        for c in self._all():
            if c["phase"] == RUNNING:
                if not c["stopping"]:
                    spec = self.specs.get(c["name"]) or self.init_specs.get(c["name"], {})
                    hook = (spec.get("lifecycle") or {}).get("preStop")
                    hook_seconds = (DEFAULT_PRESTOP_SECONDS if prestop is None else prestop)
                    c["stopAt"] = t + (hook_seconds if hook else 0) + (
                        DEFAULT_EXIT_SECONDS if exit_seconds is None else exit_seconds
                    )
                    c["stopping"], c["dies"] = True, None
                c["until"] = min(c["stopAt"], deadline)
            elif c["phase"] == CRASHED:
                self._end(c, t, c["exit"])
            elif c["phase"] not in DONE:
                self._end(c, t, UNKNOWN_EXIT)
        self.sync(t)

    def evict(self, t: float, message: str) -> None:
        """The kubelet evicts the pod: every container killed at once, the pod Failed."""
        self.rec["evicted"] = {"at": t, "message": message}
        for c in self._all():
            if c["phase"] == RUNNING:
                self._end(c, t, KILLED_EXIT)
            elif c["phase"] == CRASHED:
                self._end(c, t, c["exit"])
            elif c["phase"] not in DONE:
                self._end(c, t, UNKNOWN_EXIT)

    def patch_images(self, t: float, images: dict[str, str]) -> None:
        """New images in place: each changed container is killed and started from its new image."""
        for c in self.rec["containers"]:
            image = images.get(c["name"])
            if image is None or image == c["image"]:
                continue
            c["image"] = image
            if self.rec["terminating"] or self.rec["evicted"] or c["phase"] in DONE:
                continue
            if c["phase"] == RUNNING:
                c["exit"] = {**GRACEFUL_EXIT, "startedAt": c["since"], "finishedAt": t}
            if c["phase"] != WAITING:
                # A new spec is a new back-off key for the kubelet: no CrashLoopBackOff wait.
                c["pullBackoff"] = 0
                self._begin_pull(c, t)

    def crash_now(self, t: float, exit: dict) -> None:
        """Kill the target container now with ``exit`` (a crash or OOM fault)."""
        c = self._container(self.target)
        if c["phase"] == RUNNING and not c["stopping"]:
            c["dies"], c["until"] = exit, t
            self.sync(t)

    def cancel_crash(self) -> None:
        """The crash fault was cleared: a container about to die lives on."""
        c = self._container(self.target)
        if c["phase"] == RUNNING and c["dies"] == CRASH_EXIT and not c["stopping"]:
            c["dies"], c["until"] = None, None

    def set_hung(self, hung: bool, t: float) -> None:
        """A hang fault: the container keeps running but its readiness probe fails."""
        c = self._container(self.target)
        if c["phase"] != RUNNING:
            return
        if hung:
            c["readyAt"] = None
        else:
            period = readiness_period(self.specs[self.target])
            c["readyAt"] = max(c["startupAt"], t + period)

    # -- transitions --------------------------------------------------------

    def _fire(self, c: dict, t: float) -> None:
        phase = c["phase"]
        if phase == PULLING:
            if self._unpullable(c):
                self._pull_failed(c, t)
            else:
                self._run(c, t)
        elif phase == PULL_FAILED:
            self._begin_pull(c, t)
        elif phase == CRASHED:
            self._run(c, t)
        elif phase == RUNNING and c["stopping"]:
            killed = c["stopAt"] > self.rec["deadline"]
            self._end(c, t, KILLED_EXIT if killed else GRACEFUL_EXIT)
        elif phase == RUNNING and self._is_init(c):
            self._end(c, t, GRACEFUL_EXIT, phase=COMPLETED)
            self._next_init(t)
        elif phase == RUNNING:
            self._crash(c, t)

    def _begin_pull(self, c: dict, t: float) -> None:
        spec = self._spec(c)
        ready_at = self.host.images.get(c["image"])
        cached = ready_at is not None and ready_at <= t
        if cached and pull_policy(spec) != "Always":
            self._run(c, t)  # IfNotPresent never asks the registry for a cached image
        elif self._unpullable(c):
            self._pull_failed(c, t)
        elif cached:
            self._run(c, t)
        else:
            if ready_at is None:
                ready_at = self.host.images[c["image"]] = t + self.host.pull_seconds
            c.update(phase=PULLING, since=t, until=ready_at)

    def _pull_failed(self, c: dict, t: float) -> None:
        c["pullBackoff"] = next_backoff(c["pullBackoff"])
        c.update(phase=PULL_FAILED, since=t, until=t + c["pullBackoff"])

    def _run(self, c: dict, t: float) -> None:
        if c["everStarted"]:
            c["restarts"] += 1
            c["last"] = c["exit"] or c["last"]
        c.update(everStarted=True, phase=RUNNING, since=t, until=None, exit=None,
                 dies=None, pullBackoff=0, stopping=False, stopAt=None)
        if self._is_init(c):
            c["until"] = t + INIT_RUN_SECONDS
            return
        c["startupAt"] = t + startup_delay(self.pod, self._spec(c))
        hung = c["name"] == self.target and self.faults.get("hang")
        c["readyAt"] = None if hung else c["startupAt"]
        if c["name"] == self.target and self.faults.get("crash"):
            c["dies"], c["until"] = CRASH_EXIT, t + CRASH_RUN_SECONDS
        elif c["name"] == self.target and self.faults.get("oom"):
            c["dies"], c["until"] = OOM_EXIT, t + CRASH_RUN_SECONDS

    def _crash(self, c: dict, t: float) -> None:
        exit = c["dies"] or CRASH_EXIT
        if exit["reason"] == OOM_EXIT["reason"]:
            self.faults.pop("oom", None)  # an OOM kill happens once
        c["backoff"] = next_backoff(c["backoff"], ran_for=t - c["since"])
        c.update(
            phase=CRASHED, exit={**exit, "startedAt": c["since"], "finishedAt": t},
            since=t, until=t + c["backoff"], dies=None, startupAt=None, readyAt=None,
        )

    def _end(self, c: dict, t: float, exit: dict | None, phase: str = STOPPED) -> None:
        started = c["since"] if c["phase"] == RUNNING else None
        if c["phase"] == RUNNING:
            exit = {**cast(dict, exit), "startedAt": started, "finishedAt": t}
        elif exit is UNKNOWN_EXIT or exit is None:
            exit = dict(UNKNOWN_EXIT)
        c.update(phase=phase, exit=exit, since=t, until=None, dies=None,
                 startupAt=None, readyAt=None, stopping=False)

    def _next_init(self, t: float) -> None:
        self.rec["init"] += 1
        if self.rec["init"] < len(self.rec["inits"]):
            self._begin_pull(self.rec["inits"][self.rec["init"]], t)
        else:
            self._start_containers(t)

    def _start_containers(self, t: float) -> None:
        for c in self.rec["containers"]:
            self._begin_pull(c, t)

    # -- lookups ------------------------------------------------------------

    def _all(self) -> list[dict]:
        return self.rec["inits"] + self.rec["containers"]

    def _is_init(self, c: dict) -> bool:
        return any(c is i for i in self.rec["inits"])

    def _spec(self, c: dict) -> dict:
        return (self.init_specs if self._is_init(c) else self.specs).get(c["name"], {})

    def _container(self, name: str) -> dict:
        return next(c for c in self.rec["containers"] if c["name"] == name)

    def _unpullable(self, c: dict) -> bool:
        return c["image"] in self.host.unpullable or bool(self.faults.get("imagepull"))
