"""Pod templates and revisions: stable names, what changes them, history, pinning."""

from __future__ import annotations

import copy
import datetime
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omegitops.app.passes import observe
from omegitops.cluster.sim import SimCluster
from omegitops.model.replica import COLUMNAR, decode_rows, encode_rows
from omegitops.render.instance import PodSpecInput, instance_pods
from omegitops.render.operator import parse_operator_values
from omegitops.render.resolve import resolve_component
from omegitops.render.revisions import (
    pack_revision,
    revision_data,
    stored_runtime_config,
    stored_templates,
)
from omegitops.render.templates import render_templates, revision_name
from omegitops.util.copying import Packed
from tests.fleet import strategy, write_service
from tests.lifecycle.test_instances import small_repo
from tests.scenario import Scenario, converged

RUNTIME = {
    "apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime",
    "metadata": {"name": "rt"},
    "spec": {"engineConfig": {
        "labels": {"logging": "on"},
        "annotations": {"prometheus.io/scrape": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "nodeSelector": {"pool": "gpu"},
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        "terminationGracePeriodSeconds": 120,
        "runner": {
            "name": "ome-container", "image": "sglang:v1",
            "command": ["python3", "-m", "sglang.launch_server"],
            "args": ["--port", "8080"],
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": 10}},
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            "readinessProbe": {"httpGet": {"path": "/health", "port": 8080},
                               "periodSeconds": 60},
        },
    }},
}


def service(**engine):
    return {"apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "svc", "namespace": "ns"},
            "spec": {"deploymentMode": "OMENative", "runtime": {"name": "rt"},
                     "engine": {"minReplicas": 2, **engine}}}


def revision(isvc, runtime=RUNTIME, operator=None):
    lifecycle = resolve_component(isvc, runtime, "engine", operator or parse_operator_values({}))
    templates = render_templates(isvc, runtime, lifecycle)
    return revision_name("svc", "engine", templates), templates


def test_revision_name_is_stable_and_shaped():
    name, _ = revision(service())
    assert name == revision(copy.deepcopy(service()))[0]
    prefix, digest = name.rsplit("-", 1)
    assert prefix == "svc-engine" and len(digest) == 8
    int(digest, 16)


def test_a_change_anywhere_in_the_template_is_a_new_revision():
    base, _ = revision(service())
    assert revision(service(runner={"image": "sglang:v2"}))[0] != base
    assert revision(service(runner={"env": [{"name": "C", "value": "3"}]}))[0] != base
    assert revision(service(labels={"team": "a"}))[0] != base
    changed = copy.deepcopy(RUNTIME)
    changed["spec"]["engineConfig"]["runner"]["args"] = ["--port", "9090"]
    assert revision(service(), runtime=changed)[0] != base


def test_lifecycle_only_changes_give_no_new_revision():
    base, _ = revision(service())
    lifecycle = {"minReadySeconds": 900, "restartPolicy": "RecreateInstanceOnPodRestart",
                 "updateStrategy": {"type": "RecreatePod",
                                    "rollingUpdate": {"maxUnavailable": 1, "partition": 1}}}
    assert revision(service(lifecycle=lifecycle))[0] == base
    assert revision(service(minReplicas=5, maxReplicas=5))[0] == base
    chart = parse_operator_values({"ome": {"controller": {"minReadySeconds": 60}}})
    assert revision(service(), operator=chart)[0] == base


def test_semantically_equal_templates_are_not_a_change():
    base, _ = revision(service())
    spelled = copy.deepcopy(RUNTIME)
    runner = spelled["spec"]["engineConfig"]["runner"]
    runner["env"] = list(reversed(runner["env"]))  # env reordered
    runner["terminationMessagePath"] = "/dev/termination-log"  # a default spelled out
    runner["readinessProbe"]["successThreshold"] = 1
    runner["resources"]["limits"]["nvidia.com/gpu"] = "1"  # a quantity as a string
    assert revision(service(), runtime=spelled)[0] == base


def test_service_overrides_merge_over_the_runtime():
    _, templates = revision(service(runner={"image": "sglang:v2",
                                            "env": [{"name": "B", "value": "x"}]}))
    container = templates["default"]["spec"]["containers"][0]
    assert container["image"] == "sglang:v2"
    assert container["command"] == ["python3", "-m", "sglang.launch_server"]
    assert {e["name"]: e["value"] for e in container["env"]} == {"A": "1", "B": "x"}


def test_pod_renders_every_template_field_and_the_ome_labels():
    isvc = service()
    name, templates = revision(isvc)
    (pod,) = instance_pods(PodSpecInput("ns", "svc", "engine", name, templates, 0, False), 3, 2)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "svc-engine-3-default-0"
    assert meta["labels"] == {
        "logging": "on", "ome.io/inferenceservice": "svc", "ome.io/component": "engine",
        "ome.io/instance-index": "3", "ome.io/instance-incarnation": "2",
        "ome.io/runner": "default", "ome.io/revision": name,
        "app.kubernetes.io/managed-by": "omegitops", "ome.io/entry": "true"}
    assert meta["annotations"] == {"prometheus.io/scrape": "true"}
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert spec["terminationGracePeriodSeconds"] == 120
    assert spec["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert spec["readinessGates"] == [{"conditionType": "ome.io/serving"}]
    container = spec["containers"][0]
    assert container["image"] == "sglang:v1" and container["args"] == ["--port", "8080"]
    assert container["readinessProbe"]["periodSeconds"] == 60
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["OME_INSTANCE_INDEX"] == "3" and env["OME_RUNNER"] == "default"
    assert "OME_LEADER_ADDRESS" not in env


def test_single_pod_surge_takes_the_other_ordinal():
    name, templates = revision(service())
    spec = PodSpecInput("ns", "svc", "engine", name, templates, 0, False)
    (pod,) = instance_pods(spec, 0, 1, base_ordinal=1)
    assert pod["metadata"]["name"] == "svc-engine-0-default-1"


def test_columnar_encoding_is_used_when_smaller_and_read_back():
    rows = [{"index": i, "incarnation": 1, "phase": "Ready", "revision": "svc-engine-1a2b3c4d",
             "pods": [], "operation": None, "lastFailure": None} for i in range(4)]
    encoded = encode_rows(rows)
    assert encoded["encoding"] == COLUMNAR
    assert encoded["columns"][:3] == ["index", "incarnation", "phase"]
    assert decode_rows(encoded) == rows
    assert decode_rows(rows) == rows
    single = rows[:1]
    assert encode_rows(single) == single  # one row: the plain list is smaller


def test_revisions_are_stored_and_pruned_by_history_limit(tmp_path):
    repo = small_repo(tmp_path / "repo", replicas=1, history=1)
    scenario = Scenario(tmp_path, repo)
    scenario.run_pass()
    stored = []
    for image in ("sglang:v2", "sglang:v3", "sglang:v4"):
        small_repo(repo, replicas=1, history=1, image=image)
        scenario.run_pass()
        with SimCluster(scenario.path) as cluster:
            stored = sorted((r["revision"], r["metadata"]["name"])
                            for r in cluster.list_objects("ControllerRevision"))
    in_use = scenario.rows("small-engine")[0]["revision"]
    desired = scenario.replica("small-engine")["spec"]["revision"]
    names = [name for _, name in stored]
    # The revision in use, the desired one, and one more of history.
    assert in_use in names and desired in names
    assert len(names) == 3
    assert [n for n, _ in stored] == sorted(n for n, _ in stored)


def test_without_a_limit_every_revision_is_kept(tmp_path):
    repo = small_repo(tmp_path / "repo", replicas=1)
    scenario = Scenario(tmp_path, repo)
    scenario.run_pass()
    for image in ("sglang:v2", "sglang:v3", "sglang:v4"):
        small_repo(repo, replicas=1, image=image)
        scenario.run_pass()
    with SimCluster(scenario.path) as cluster:
        assert len(cluster.list_objects("ControllerRevision")) == 4


def test_pinned_runtime_keeps_its_template_and_reports_drift(tmp_path):
    repo = small_repo(tmp_path / "repo", replicas=1, auto_sync=False)
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    before = scenario.replica("small-engine")["spec"]["revision"]
    small_repo(repo, replicas=1, auto_sync=False, runtime_image="sglang:v9")
    scenario.run_pass()
    replica = scenario.replica("small-engine")
    assert replica["spec"]["revision"] == before
    drift = next(c for c in replica["status"]["conditions"] if c["type"] == "RuntimeDrifted")
    assert drift["status"] == "True"
    # Unpinned, the same runtime change is a new revision.
    small_repo(repo, replicas=1, auto_sync=True, runtime_image="sglang:v9")
    scenario.run_pass()
    assert scenario.replica("small-engine")["spec"]["revision"] != before


# -- a revision whose ControllerRevision is gone ------------------------------------


def _condition(scenario, kind, name="svc-engine"):
    conditions = scenario.status(name)["conditions"]
    return next((c for c in conditions if c["type"] == kind), None)


def _staged_with_the_prior_revision_deleted(tmp_path, **service):
    """Two Instances at partition 1, the held one's ControllerRevision deleted by hand."""
    life = {**service.pop("lifecycle", {}),
            **strategy("InPlaceIfPossible", partition=1, maxUnavailable=1)}
    scenario, change = converged(tmp_path, replicas=2, lifecycle=life, **service)
    prior = scenario.replica("svc-engine")["spec"]["revision"]
    change(image="sglang:v2")
    scenario.until_idle()
    current = scenario.replica("svc-engine")["spec"]["revision"]
    assert _condition(scenario, "Ready")["reason"] == "Staged"
    with SimCluster(scenario.path) as cluster:
        cluster.delete_object("ControllerRevision", "demo", prior)
    return scenario, prior, current


def _revisions(scenario, prefix):
    return {p["metadata"]["name"]: (p["metadata"]["labels"]["ome.io/revision"],
                                    p["spec"]["containers"][0]["image"])
            for p in scenario.pods(prefix) if not p["metadata"].get("deletionTimestamp")}


def test_a_held_revision_deleted_by_hand_keeps_its_pods_and_rebuilds_at_the_current(
        tmp_path):
    scenario, prior, current = _staged_with_the_prior_revision_deleted(tmp_path)
    uid = scenario.pods("svc-engine-0-")[0]["metadata"]["uid"]
    scenario.until_idle()
    # The held pod still runs, and is still counted as held: that much is true.
    (pod,) = scenario.pods("svc-engine-0-")
    assert pod["metadata"]["uid"] == uid
    assert _revisions(scenario, "svc-engine-0-") == {"svc-engine-0-default-0":
                                                     (prior, "sglang:v1")}
    assert _condition(scenario, "Ready")["message"] == (
        f"Staged at partition 1: 1/2 Instances on {current}, 1 held on the prior revision")
    missing = _condition(scenario, "RevisionMissing")
    assert (missing["status"], missing["reason"]) == ("True", "ControllerRevisionGone")
    assert missing["message"] == (
        f"revision {prior} of Instances 0 has no ControllerRevision: their running pods keep "
        f"it, and what must be rebuilt is built at {current}")
    # Its pod lost, the Instance can't be rebuilt at the prior revision: it is built at
    # the current one, and labelled so.
    scenario.fault("evict", pod="svc-engine-0-default-0")
    scenario.until_idle()
    assert {r["index"]: r["revision"] for r in scenario.rows("svc-engine")} == {
        0: current, 1: current}
    assert _revisions(scenario, "svc-engine-0-") == {"svc-engine-0-default-0":
                                                     (current, "sglang:v2")}
    ready = _condition(scenario, "Ready")
    assert (ready["reason"], ready["message"]) == ("AllInstancesServing",
                                                   "2/2 Instances serving")
    assert _condition(scenario, "RevisionMissing") is None
    (event,) = scenario.events("RevisionMissing")
    assert event["type"] == "Warning"
    assert event["message"] == (
        f"OMENative component=engine instance=0 revision {prior} has no ControllerRevision, "
        f"so nothing can be rebuilt at it; building at {current} instead")


@pytest.mark.parametrize("policy", [None, "None"])
def test_a_gang_of_a_deleted_revision_is_restarted_whole_at_the_current(tmp_path, policy):
    """A gang moves whole: under either restart policy, a lost worker of a gang whose
    revision is gone restarts the whole gang at the current revision."""
    life = {"restartPolicy": policy} if policy else {}
    scenario, prior, current = _staged_with_the_prior_revision_deleted(
        tmp_path, workers=1, lifecycle=life)
    scenario.fault("evict", pod="svc-engine-0-worker-0")
    scenario.until_idle()
    row = next(r for r in scenario.rows("svc-engine") if r["index"] == 0)
    assert (row["revision"], row["incarnation"], row["phase"]) == (current, 2, "Ready")
    assert _revisions(scenario, "svc-engine-0-") == {
        "svc-engine-0-leader-0": (current, "sglang:v2"),
        "svc-engine-0-worker-0": (current, "sglang:v2")}
    assert {p["metadata"]["labels"]["ome.io/instance-incarnation"]
            for p in scenario.pods("svc-engine-0-")} == {"2"}
    assert [e["message"] for e in scenario.events("RevisionMissing")] == [
        f"OMENative component=engine instance=0 revision {prior} has no ControllerRevision, "
        + (f"so its missing pods cannot be built; restarting the whole Instance at {current}"
           if policy else f"so nothing can be rebuilt at it; building at {current} instead")]
    assert _condition(scenario, "RevisionMissing") is None


def test_a_held_revision_deleted_by_hand_is_recreated_not_patched_when_released(tmp_path):
    """Without the prior templates nothing shows the change is images only, so
    InPlaceIfPossible recreates the held Instance once the partition lets it move."""
    scenario, prior, current = _staged_with_the_prior_revision_deleted(tmp_path)
    write_service(scenario.repo, replicas=2, image="sglang:v2",
                  lifecycle=strategy("InPlaceIfPossible", maxUnavailable=1))
    scenario.until_idle()
    row = next(r for r in scenario.rows("svc-engine") if r["index"] == 0)
    assert (row["revision"], row["incarnation"]) == (current, 2)
    assert (f"OMENative component=engine instance=0 updating to {current} "
            "(InPlaceIfPossible: Drain)") in [e["message"] for e in scenario.events()]
    assert _revisions(scenario, "svc-engine-0-") == {"svc-engine-0-default-0":
                                                     (current, "sglang:v2")}
    assert _condition(scenario, "RevisionMissing") is None
    assert prior != current


def test_a_lost_status_and_a_deleted_revision_rebuild_a_partial_gang_whole(tmp_path):
    """Rows rebuilt from the pods take the held gang's revision from its labels; with
    that revision gone and a worker lost too, the gang restarts whole at the current."""
    scenario, prior, current = _staged_with_the_prior_revision_deleted(tmp_path, workers=1)
    scenario.strict_gangs = False
    with SimCluster(scenario.path) as cluster:
        cluster.delete_object("InferenceReplica", "demo", "svc-engine")
        cluster.delete_pod("demo", "svc-engine-0-worker-0", 0)
    scenario.advance(1)
    scenario.until_idle()
    rows = {r["index"]: r for r in scenario.rows("svc-engine")}
    assert {i: (r["revision"], r["incarnation"], r["phase"]) for i, r in rows.items()} == {
        0: (current, 2, "Ready"), 1: (current, 2, "Ready")}
    assert set(_revisions(scenario, "svc-engine-").values()) == {
        (current, "sglang:v2")}
    assert [e["message"] for e in scenario.events("RevisionMissing")] == [(
        f"OMENative component=engine instance=0 revision {prior} has no ControllerRevision, "
        f"so its missing pods cannot be built; restarting the whole Instance at {current}")]


def test_an_in_place_target_whose_revision_is_deleted_is_recreated_at_the_newest(tmp_path):
    """Images not yet patched, and the target's templates gone with its withdrawn
    ControllerRevision: nothing says what to patch, so the Instance is recreated."""
    life = strategy("InPlaceIfPossible")
    scenario, change = converged(tmp_path, replicas=1, lifecycle=life)
    change(image="sglang:v2")
    scenario.run_pass()
    (row,) = scenario.rows("svc-engine")
    assert (row["operation"]["mode"], row["operation"]["step"]) == ("InPlace", "PatchImages")
    withdrawn = row["operation"]["targetRevision"]
    change(image="sglang:v3")
    with SimCluster(scenario.path) as cluster:
        cluster.delete_object("ControllerRevision", "demo", withdrawn)
    scenario.run_pass()
    (row,) = scenario.rows("svc-engine")
    assert row["operation"]["mode"] == "Drain"
    scenario.until_idle()
    newest = scenario.replica("svc-engine")["spec"]["revision"]
    (row,) = scenario.rows("svc-engine")
    assert (row["revision"], row["incarnation"]) == (newest, 2)
    assert _revisions(scenario, "svc-engine-") == {"svc-engine-0-default-0":
                                                   (newest, "sglang:v3")}
    assert [e["message"] for e in scenario.events("RevisionMissing")] == [(
        f"OMENative component=engine instance=0 revision {withdrawn} has no "
        "ControllerRevision, so its images cannot be set in place; recreating the Instance "
        f"at {newest}")]


def test_an_observed_revision_keeps_its_data_packed_until_read():
    data = {"templates": {"default": {"metadata": {"labels": {"a": "b"}},
                                      "spec": {"containers": [{"name": "c", "image": "i:1",
                                                               "args": ["--x", 1.5, True,
                                                                        None]}]}}},
            "runtimeConfig": {"engineConfig": {"minReplicas": 2}}}
    observed = {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": "svc-engine-1", "resourceVersion": "7"},
                "revision": 1, "data": copy.deepcopy(data)}
    packed = pack_revision(observed)
    assert isinstance(packed["data"], Packed)
    assert observed["data"] == data  # the listed object is left whole
    assert pack_revision(packed) is packed
    assert packed["metadata"] is observed["metadata"]
    # Read back exactly, types and all, as a copy of its own for each reader.
    templates = stored_templates([packed], "svc-engine-1")
    assert templates == data["templates"]
    assert stored_templates([packed], "svc-engine-1") is not templates
    assert stored_runtime_config([packed], "svc-engine-1") == data["runtimeConfig"]
    assert stored_templates([packed], "other") is None
    assert revision_data({"metadata": {"name": "x"}}) == {}


def test_packed_data_marshal_cannot_take_is_kept_and_copied():
    """A value JSON has no type for (a date YAML read) is never validated into templates;
    were one there, packing would keep it rather than stop the run."""
    value = {"when": datetime.date(2026, 12, 2), "list": [1, "a"]}
    packed = Packed(value)
    first, second = packed.unpack(), packed.unpack()
    assert first == value == second and first is not second
    assert first["list"] is not value["list"]
    assert Packed({"a": [1]}) == Packed({"a": [1]}) != Packed({"a": [2]})


def test_a_held_instance_is_rebuilt_at_its_revision_from_packed_data(tmp_path):
    """At partition 1 the held Instance runs the prior revision; lost, it is rebuilt from
    the templates its ControllerRevision stores, which the pass observed packed."""
    life = strategy("RecreatePod", partition=1, maxUnavailable=1)
    scenario, change = converged(tmp_path, replicas=2, lifecycle=life)
    prior = scenario.replica("svc-engine")["spec"]["revision"]
    change(image="sglang:v2")
    scenario.until_idle()
    current = scenario.replica("svc-engine")["spec"]["revision"]
    with SimCluster(scenario.path) as cluster:
        revisions = observe(cluster).revisions[("demo", "svc", "engine")]
    assert sorted(r["metadata"]["name"] for r in revisions) == sorted([prior, current])
    assert all(isinstance(r["data"], Packed) for r in revisions)
    scenario.fault("evict", pod="svc-engine-0-default-0")
    scenario.until_idle()
    assert _revisions(scenario, "svc-engine-") == {
        "svc-engine-0-default-0": (prior, "sglang:v1"),
        "svc-engine-1-default-0": (current, "sglang:v2")}


def test_an_in_place_update_cut_before_its_patch_is_stored_first_and_never_finished_blind(
        tmp_path):
    """An in-place update recorded at WaitReady, its pass cut before the pod patch, the
    revision withdrawn and its ControllerRevision deleted by hand meanwhile: the Instance
    is not finished on a revision its pod never ran; it stays on what the pod runs, and
    moves again. (Without the deletion, the stored revision lets the next pass patch the
    pod; nightly seed 430, in test_fault_campaigns, is the case where it was not stored.)"""
    from omegitops.render import pods as P

    life = strategy("InPlaceIfPossible")
    repo = write_service(tmp_path / "repo", replicas=1, lifecycle=life)
    scenario = Scenario(tmp_path, repo)
    scenario.until_idle()
    write_service(repo, replicas=1, lifecycle=life, image="sglang:v2")

    def step(s):
        rows = s.rows("svc-engine")
        return (rows[0].get("operation") or {}).get("step")

    while step(scenario) != "PatchImages":
        scenario.settle(scenario.run_pass())
    # The pass that records WaitReady: cut after its first write (the InferenceReplica's
    # status; its object and revision are as they were), before the pod is patched.
    scenario.run_pass(kill_after=1)
    [row] = scenario.rows("svc-engine")
    with SimCluster(scenario.path) as cluster:
        stored = {r["metadata"]["name"] for r in cluster.list_objects("ControllerRevision")}
        [pod] = cluster.list_pods()
    assert row["operation"]["step"] == "WaitReady" and row["revision"] in stored
    assert P.revision_of(pod) != row["revision"], "the patch was cut"
    v2 = row["revision"]
    # Withdrawn, and its ControllerRevision deleted by hand.
    write_service(repo, replicas=1, lifecycle=life, image="sglang:v3")
    with SimCluster(scenario.path) as cluster:
        cluster.delete_object("ControllerRevision", "demo", v2)
    scenario.run_pass()
    [row] = scenario.rows("svc-engine")
    assert row["revision"] != v2, "finished on a revision the pod never ran"
    scenario.until_idle()
    [row] = scenario.rows("svc-engine")
    target = scenario.replica("svc-engine")["spec"]["revision"]
    [pod] = scenario.pods()
    assert row["phase"] == "Ready" and row["revision"] == target == P.revision_of(pod)
    assert pod["spec"]["containers"][0]["image"] == "sglang:v3"


# -- the smaller encoding, chosen without writing both ------------------------------

_ROW_VALUES = st.one_of(st.none(), st.integers(), st.text(max_size=5),
                        st.lists(st.integers(), max_size=2),
                        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(deadline=None)  # a shared machine's pauses are no failure
@given(st.lists(st.dictionaries(st.sampled_from(
    ["index", "incarnation", "phase", "pods", "operation", "lastFailure", "é\"\\k"]),
    _ROW_VALUES), min_size=1, max_size=6))
def test_encode_rows_keeps_the_shorter_json(rows):
    """encode_rows counts the characters ColumnarV2 saves instead of writing both forms:
    the count is exact, so the form kept is the one whose compact JSON is shorter."""
    def size(value):
        return len(json.dumps(value, separators=(",", ":")))

    encoded = encode_rows(rows)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    columnar = {"encoding": "ColumnarV2", "columns": columns,
                "rows": [[row.get(c) for c in columns] for row in rows]}
    assert encoded in (rows, columnar)
    assert size(encoded) == min(size(rows), size(columnar))
    if size(columnar) < size(rows):
        assert encoded == columnar
    else:
        assert encoded == rows
