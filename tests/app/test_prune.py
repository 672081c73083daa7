"""--prune: components the repository no longer has are torn down, and only then."""

from __future__ import annotations

import shutil

import yaml

from omegitops.cluster.sim import SimCluster
from tests.conftest import EXAMPLES


def setup(tmp_path, cli):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    cluster = tmp_path / "c.json"
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                       "--until-idle")
    assert code == 0, err
    return repo, cluster


def state(cluster):
    with SimCluster(cluster) as sim:
        return {
            "pods": {p["metadata"]["name"] for p in sim.list_pods()},
            "ireps": {r["metadata"]["name"] for r in sim.list_objects("InferenceReplica")},
            "services": {s["metadata"]["name"] for s in sim.list_objects("Service")},
            "revisions": {r["metadata"]["name"] for r in sim.list_objects("ControllerRevision")},
            "events": [e["reason"] for e in sim.list_objects("Event")],
        }


def reconcile(cli, repo, cluster, *extra):
    return cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}", "--until-idle",
               *extra)


def test_a_removed_service_stays_without_prune(tmp_path, cli):
    repo, cluster = setup(tmp_path, cli)
    (repo / "services" / "llama-demo" / "llama-chat.yaml").unlink()
    code, _, err = reconcile(cli, repo, cluster)
    assert code == 0
    assert err.count(
        "llama-demo/llama-chat-engine: its component is no longer in the repository") == 1
    assert "llama-chat-engine-0-default-0" in state(cluster)["pods"]


def test_a_service_switched_to_raw_deployment_is_named_as_such_not_as_gone(tmp_path, cli):
    """The component is still in the repository, in a mode omegitops does not manage:
    the warning says so (it once said the component was no longer there)."""
    repo, cluster = setup(tmp_path, cli)
    path = repo / "services" / "llama-demo" / "llama-chat.yaml"
    path.write_text(path.read_text().replace("deploymentMode: OMENative",
                                             "deploymentMode: RawDeployment"))
    code, _, err = reconcile(cli, repo, cluster)
    assert code == 0, err
    said = [line for line in err.splitlines() if "llama-chat-engine" in line
            and "InferenceReplica" in line]
    assert len(said) == 1, said
    assert ("InferenceService llama-demo/llama-chat engine is RawDeployment in the "
            "repository now") in said[0]
    assert "no longer in the repository" not in err
    assert "llama-chat-engine-0-default-0" in state(cluster)["pods"]


def test_prune_tears_a_removed_service_down(tmp_path, cli):
    repo, cluster = setup(tmp_path, cli)
    (repo / "services" / "llama-demo" / "llama-chat.yaml").unlink()
    code, _, err = reconcile(cli, repo, cluster, "--prune")
    assert code == 0, err
    after = state(cluster)
    assert not [p for p in after["pods"] if p.startswith("llama-chat-")]
    assert "llama-chat-engine" not in after["ireps"]
    assert "llama-chat-engine" not in after["services"]
    assert not [r for r in after["revisions"] if r.startswith("llama-chat-")]
    assert "ComponentRemoved" in after["events"]
    # Everything else is untouched.
    assert "qwen3-0-6b-engine-0-default-0" in after["pods"]
    assert len(after["ireps"]) == 6


def test_prune_removes_a_component_dropped_from_a_service(tmp_path, cli):
    repo, cluster = setup(tmp_path, cli)
    path = repo / "services" / "llama-demo" / "llama-pd.yaml"
    service = yaml.safe_load(path.read_text())
    del service["spec"]["router"]
    path.write_text(yaml.safe_dump(service))
    code, _, err = reconcile(cli, repo, cluster, "--prune")
    assert code == 0, err
    after = state(cluster)
    assert "llama-pd-router" not in after["ireps"]
    assert {"llama-pd-engine", "llama-pd-decoder"} <= after["ireps"]


def test_an_invalid_manifest_is_never_a_reason_to_delete(tmp_path, cli):
    repo, cluster = setup(tmp_path, cli)
    path = repo / "services" / "llama-demo" / "llama-chat.yaml"
    path.write_text(path.read_text().replace("minReadySeconds: 900", "minReadySeconds: -1"))
    code, _, err = reconcile(cli, repo, cluster, "--prune")
    assert code == 1  # the invalid manifest is reported
    assert "llama-chat-engine-0-default-0" in state(cluster)["pods"]
    # Said once for the run, and as what it is: kept, not "no longer in the repository".
    kept = [line for line in err.splitlines() if "llama-chat-engine" in line
            and "InferenceReplica" in line]
    assert len(kept) == 1, kept
    assert "InferenceService llama-demo/llama-chat is invalid, kept" in kept[0]


def test_an_unreadable_file_refuses_to_prune(tmp_path, cli):
    repo, cluster = setup(tmp_path, cli)
    (repo / "services" / "llama-demo" / "llama-chat.yaml").unlink()
    (repo / "services" / "broken.yaml").write_text("kind: [unclosed\n")
    code, _, err = reconcile(cli, repo, cluster, "--prune")
    assert code == 1
    assert "refusing to prune: services/broken.yaml could not be read" in err
    assert "llama-chat-engine-0-default-0" in state(cluster)["pods"]


def test_an_empty_repository_refuses_to_prune(tmp_path, cli):
    _, cluster = setup(tmp_path, cli)
    empty = tmp_path / "empty"
    empty.mkdir()
    before = state(cluster)["pods"]
    code, _, err = reconcile(cli, empty, cluster, "--prune")
    assert code == 1
    assert "refusing to prune: the repository yields no services" in err
    assert state(cluster)["pods"] == before


def test_objects_not_labelled_as_managed_are_never_touched(tmp_path, cli):
    repo, cluster = setup(tmp_path, cli)
    with SimCluster(cluster) as sim:
        sim.create_pod({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "llama-chat-engine-0-default-9", "namespace": "llama-demo",
                         "labels": {"ome.io/inferenceservice": "llama-chat",
                                    "ome.io/component": "engine",
                                    "ome.io/instance-index": "0"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        })
    (repo / "services" / "llama-demo" / "llama-chat.yaml").unlink()
    code, _, err = reconcile(cli, repo, cluster, "--prune")
    assert code == 0, err
    assert "llama-chat-engine-0-default-9" in state(cluster)["pods"]


def test_a_gang_torn_down_after_losing_a_pod_and_its_revision_is_not_rebuilt(tmp_path, cli):
    """A removed gang whose ControllerRevision was deleted (a namespace on its way out, a
    person) and which lost a pod: the teardown deletes what is left and rebuilds nothing
    (a restart would need the templates that are gone)."""
    repo, cluster = setup(tmp_path, cli)
    (repo / "services" / "deepseek-r1" / "deepseek-r1.yaml").unlink()
    with SimCluster(cluster) as sim:
        for revision in sim.list_objects("ControllerRevision"):
            if revision["metadata"]["namespace"] == "deepseek-r1":
                sim.delete_object("ControllerRevision", "deepseek-r1",
                                  revision["metadata"]["name"])
        sim.delete_pod("deepseek-r1", "deepseek-r1-engine-0-worker-0", 0)
    code, _, err = reconcile(cli, repo, cluster, "--prune")
    assert code == 0, err
    after = state(cluster)
    assert not [p for p in after["pods"] if p.startswith("deepseek-r1-")]
    assert "deepseek-r1-engine" not in after["ireps"]
    assert "RestartTriggered" not in [e for e in after["events"]]


def test_a_kustomize_patch_beside_its_service_is_ambiguous_and_deletes_nothing(tmp_path, cli):
    """An overlay's patch file holds the service's name and namespace and one field, no
    deploymentMode: read first (path order), it used to stand for the service as a
    RawDeployment "not managed", and --prune tore the running service down. Any copy
    that would be OMENative makes the object ambiguous: an error, and no teardown."""
    repo, cluster = setup(tmp_path, cli)
    overlay = repo / "overlays" / "prod"
    overlay.mkdir(parents=True)
    (overlay / "a-patch.yaml").write_text(yaml.safe_dump({
        "apiVersion": "ome.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "llama-chat", "namespace": "llama-demo"},
        "spec": {"engine": {"minReplicas": 4}}}))
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1, out + err
    assert "overlays/prod/a-patch.yaml" in out + err and "duplicate object" in out + err
    code, _, err = reconcile(cli, repo, cluster, "--prune")
    assert code == 1, err
    assert "llama-chat-engine-0-default-0" in state(cluster)["pods"]
    assert "ComponentRemoved" not in state(cluster)["events"]


def _move_out(repo, tmp_path):
    """The llama-chat service moved to a folder the walk reaches only through a link."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(repo / "services" / "llama-demo" / "llama-chat.yaml", outside / "chat.yaml")
    return outside


def test_a_folder_link_is_listed_not_followed_and_refuses_pruning(tmp_path, cli):
    repo, cluster = setup(tmp_path, cli)
    outside = _move_out(repo, tmp_path)
    (repo / "services" / "linked").symlink_to(outside, target_is_directory=True)
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1 and "services/linked" in out + err
    assert "symbolic link to a folder" in out + err and "not followed" in out + err
    code, _, err = reconcile(cli, repo, cluster, "--prune")
    assert code == 1 and "refusing to prune" in err
    assert "llama-chat-engine-0-default-0" in state(cluster)["pods"]


def test_a_folder_that_cannot_be_read_is_listed_and_refuses_pruning(tmp_path, cli,
                                                                   monkeypatch):
    """Mode 000 (root reads it anyway, so the refusal is played by scandir)."""
    import os

    repo, cluster = setup(tmp_path, cli)
    locked = repo / "services" / "locked"
    locked.mkdir()
    shutil.move(repo / "services" / "llama-demo" / "llama-chat.yaml", locked / "chat.yaml")
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path) == os.fspath(locked):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1 and "services/locked" in out + err
    assert "folder cannot be read (Permission denied)" in out + err
    code, _, err = reconcile(cli, repo, cluster, "--prune")
    assert code == 1 and "refusing to prune" in err
    assert "llama-chat-engine-0-default-0" in state(cluster)["pods"]


def test_a_submodule_not_checked_out_is_listed_and_refuses_pruning(tmp_path, cli):
    repo, cluster = setup(tmp_path, cli)
    (repo / "services" / "llama-demo" / "llama-chat.yaml").unlink()
    (repo / "team-b").mkdir()  # what a clone without --recurse-submodules leaves
    (repo / ".gitmodules").write_text('[submodule "team-b"]\n\tpath = team-b\n'
                                      "\turl = https://example.com/team-b.git\n")
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1 and "team-b" in out + err and "submodule not checked out" in out + err
    code, _, err = reconcile(cli, repo, cluster, "--prune")
    assert code == 1 and "refusing to prune" in err
    assert "llama-chat-engine-0-default-0" in state(cluster)["pods"]


def test_a_gang_torn_down_in_the_middle_of_a_surge_builds_nothing(tmp_path, cli):
    """A gang removed while its SurgeThenDrain update was in flight, its revisions gone
    with its namespace: the teardown ends the update where it stands and deletes every
    Instance. It used to carry the surge on, and failed every pass to build the
    replacement's pods from templates no longer stored (KeyError: 'leader')."""
    from omegitops.model.replica import decode_rows

    repo, cluster = setup(tmp_path, cli)
    runtime = repo / "runtimes" / "srt-deepseek-rdma.yaml"
    runtime.write_text(runtime.read_text().replace("cu129", "cu130"))
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}")
    assert code == 0, err
    with SimCluster(cluster) as sim:
        replica = sim.get_object("InferenceReplica", "deepseek-r1", "deepseek-r1-engine")
        modes = {(r.get("operation") or {}).get("mode")
                 for r in decode_rows(replica["status"]["instances"])}
        assert "Surge" in modes, modes
        for revision in sim.list_objects("ControllerRevision"):
            if revision["metadata"]["namespace"] == "deepseek-r1":
                sim.delete_object("ControllerRevision", "deepseek-r1",
                                  revision["metadata"]["name"])
    (repo / "services" / "deepseek-r1" / "deepseek-r1.yaml").unlink()
    code, _, err = reconcile(cli, repo, cluster, "--prune")
    assert code == 0, err
    assert "teardown not planned" not in err
    after = state(cluster)
    assert not [p for p in after["pods"] if p.startswith("deepseek-r1-")]
    assert "deepseek-r1-engine" not in after["ireps"]
