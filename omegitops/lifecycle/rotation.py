"""Gates converge every pass, whatever the last pass managed to write.

Steps put pods into rotation and take them out as they go, but a pass can be
cut short between two gate writes, and the step it then recorded never writes
the gate again. So after every step, each Instance's gates are brought to what
its state says:

- a Failed Instance is out of rotation until it is reset or rebuilt
  (instances.txt); so is an Instance being deleted, and one being brought up
  (re)created until its pods are all ready: Create, a whole-Instance Restart
  and a Drain update before WaitAvailable (the step that reaches WaitAvailable
  puts every pod in rotation in the same pass);
- a gang is never left partly in rotation: when its pods' gates would differ,
  none of them keeps it, and the step that admits it puts it back whole. The
  exception is the repair of one pod under restartPolicy None, which exists for
  engines that take a replaced pod back into a running group: the others serve
  on meanwhile (restart-policy.txt).

Instances whose pods serve on through their operation (a surge source, an
in-place update) are left to their steps, beyond the gang rule.
"""

from __future__ import annotations

from omegitops.lifecycle.work import Work
from omegitops.model.actions import SetServing
from omegitops.model.state import Json, Mode, OperationType, Phase, Row, Step
from omegitops.render import pods as P

# The steps of a bring-up before its pods are admitted, and of a teardown.
_OUT_STEPS = (Step.UNROUTE, Step.DELETE_PODS, Step.WAIT_GONE, Step.CREATE_PODS,
              Step.WAIT_READY)


def converge_rotation(work: Work) -> None:
    planned = {a.name: a.serving for a in work.actions if isinstance(a, SetServing)}
    for index, row in work.rows.items():
        live = [p for p in work.groups.get(index, [])
                if not P.is_terminating(p) and not P.has_ended(p)]
        gates = {planned.get(p["metadata"]["name"], P.gate_set(p)) for p in live}
        one_pod = row.operation is not None and row.operation.mode == Mode.POD
        mixed = work.desired.gang and len(gates) > 1 and not one_pod
        if mixed or (True in gates and out_of_rotation(row)):
            _take_out(work, live)


def out_of_rotation(row: Row) -> bool:
    """Whether the Instance's state says none of its pods serves."""
    if row.phase == Phase.FAILED:
        return True
    operation = row.operation
    if operation is None:
        return False
    kind, mode = operation.type, operation.mode
    if kind == OperationType.DELETE:
        return True
    whole = kind == OperationType.CREATE or (
        kind == OperationType.RESTART and mode == Mode.INSTANCE) or (
        kind == OperationType.UPDATE and mode == Mode.DRAIN)
    return whole and operation.step in _OUT_STEPS


def _take_out(work: Work, pods: list[Json]) -> None:
    """Out of rotation, all of them: a gate write this pass planned the other way goes."""
    names = {p["metadata"]["name"] for p in pods}
    work.actions[:] = [a for a in work.actions
                       if not (isinstance(a, SetServing) and a.name in names)]
    work.route(pods, False)
