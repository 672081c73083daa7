"""``omegitops validate``: every bad input gets an error naming file, line and field."""

import json
import os

import pytest

from omegitops.render.templates import OME_LABELS
from tests.conftest import RUNTIME, SERVICE, write_repo


def repo_with(tmp_path, service=SERVICE, runtime=RUNTIME, **extra):
    files = {"runtimes/small.yaml": runtime, "services/small.yaml": service, **extra}
    return str(write_repo(tmp_path, files))


def test_valid_repository(cli, tmp_path):
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path))
    assert code == 0
    assert "InferenceService demo/small" in out and "OMENative (engine)" in out


def test_the_documented_example_message(cli, tmp_path):
    service = SERVICE + "    lifecycle:\n      minReadySeconds: -5\n"
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path, service=service))
    assert code == 1
    assert (
        "services/small.yaml:16: InferenceService demo/small: "
        "spec.engine.lifecycle.minReadySeconds: -5 is less than the minimum of 0" in out
    )


def test_valid_objects_are_still_listed_beside_errors(cli, tmp_path):
    service = SERVICE + "    lifecycle:\n      minReadySeconds: -5\n"
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path, service=service), "-o", "json")
    report = json.loads(out)
    assert code == 1
    assert [v["object"] for v in report["valid"]] == ["ClusterServingRuntime srt-small"]
    assert report["errors"][0]["field"] == "spec.engine.lifecycle.minReadySeconds"
    assert report["errors"][0]["line"] == 16


@pytest.mark.parametrize(
    "addition, expected",
    [
        ("    lifecycle:\n      updateStrategy:\n        type: BlueGreen\n",
         (":17: InferenceService demo/small: spec.engine.lifecycle.updateStrategy.type: "
         "'BlueGreen' is not one of")),
        ("    lifecycle:\n      minReadySeconds: soon\n",
         (":16: InferenceService demo/small: spec.engine.lifecycle.minReadySeconds: "
         "'soon' is not of type 'integer'")),
        ("    lifecycle:\n      restartPolicy: Always\n",
         "spec.engine.lifecycle.restartPolicy: 'Always' is not one of"),
        ("    lifecycle:\n      minReadySecond: 5\n",
         ":16: InferenceService demo/small: spec.engine.lifecycle.minReadySecond: unknown field"),
        ("    lifecycle:\n      updateStrategy:\n        rollingUpdate:\n          maxSurge: 150%\n",
         (":18: InferenceService demo/small: "
         "spec.engine.lifecycle.updateStrategy.rollingUpdate.maxSurge: 150% is more than 100%")),
        ("    lifecycle:\n      updateStrategy:\n        rollingUpdate:\n          partition: -1\n",
         "spec.engine.lifecycle.updateStrategy.rollingUpdate.partition: -1 is less than"),
        ("    lifecycle:\n      instanceReadyTimeout: 30 minutes\n",
         "spec.engine.lifecycle.instanceReadyTimeout: '30 minutes' does not match"),
    ],
)
def test_bad_lifecycle_values(cli, tmp_path, addition, expected):
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path, service=SERVICE + addition))
    assert code == 1
    assert expected in out


@pytest.mark.parametrize("addition, expected", [
    (("    lifecycle:\n      updateStrategy:\n        rollingUpdate:\n"
      "          maxSurge: 0\n          maxUnavailable: 0\n"),
     "under SurgeThenDrain: no Instance can move and every change holds at the Budget gate"),
    (("    lifecycle:\n      updateStrategy:\n        type: RecreatePod\n        rollingUpdate:\n"
      "          maxUnavailable: 0%\n"),
     ("spec.engine.lifecycle.updateStrategy.rollingUpdate.maxUnavailable: BudgetsCannotMove: "
      "maxUnavailable 0% (from isvc) under RecreatePod, which reads only maxUnavailable: no "
      "serving Instance can move")),
])
def test_zero_budgets_in_a_service_are_a_warning_not_an_error(cli, tmp_path, addition,
                                                               expected):
    """update-strategies.txt makes only an invalid operator default an error: in a
    service or a runtime a zero budget is legal, and produces the Budget hold."""
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path, service=SERVICE + addition))
    assert code == 0, out
    assert expected in out.split("warnings:")[1]


def test_zero_budgets_from_the_runtime_are_named(cli, tmp_path):
    runtime = RUNTIME + ("    lifecycle:\n      updateStrategy:\n        rollingUpdate:\n"
                         "          maxSurge: 0\n          maxUnavailable: 0\n")
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path, runtime=runtime))
    assert code == 0
    assert "maxSurge 0 (from runtime) and maxUnavailable 0 (from runtime)" in out


def test_zero_surge_alone_is_fine_when_unavailability_is_allowed(cli, tmp_path):
    service = SERVICE + ("    lifecycle:\n      updateStrategy:\n        rollingUpdate:\n"
                         "          maxSurge: 0\n          maxUnavailable: 1\n")
    code, _, _ = cli("validate", "--repo", repo_with(tmp_path, service=service))
    assert code == 0


def test_malformed_yaml_does_not_stop_the_others(cli, tmp_path):
    repo = repo_with(tmp_path, **{"services/broken.yaml": "kind: [unclosed\n"})
    code, out, _ = cli("validate", "--repo", repo)
    assert code == 1
    assert "services/broken.yaml:" in out
    assert "InferenceService demo/small" in out.split("invalid:")[0]


def test_missing_runtime(cli, tmp_path):
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path, runtime="{}\n"))
    assert code == 1
    assert ("services/small.yaml:11: InferenceService demo/small: spec.runtime.name: "
            "runtime 'srt-small' not found") in out


def test_invalid_runtime_makes_its_services_invalid(cli, tmp_path):
    runtime = RUNTIME.replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 1\n    bogus: 1")
    runtime = RUNTIME + "    lifecycle:\n      minReadySeconds: -1\n"
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path, runtime=runtime))
    assert code == 1
    assert "runtime 'srt-small' is invalid (see its errors)" in out


def test_omenative_service_without_runtime_name(cli, tmp_path):
    service = SERVICE.replace("  runtime:\n    name: srt-small\n", "")
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path, service=service))
    assert code == 1
    assert "component engine runs on OMENative but the service names no runtime" in out


def test_duplicate_objects_name_both_places(cli, tmp_path):
    repo = repo_with(tmp_path, **{"services/copy.yaml": SERVICE})
    code, out, _ = cli("validate", "--repo", repo)
    assert code == 1
    assert ("services/small.yaml:1: InferenceService demo/small: duplicate object, "
            "also defined at services/copy.yaml:1") in out
    assert "InferenceService demo/small" not in out.split("invalid:")[0]


def test_duplicate_runtime_used_by_an_omenative_service(cli, tmp_path):
    repo = repo_with(tmp_path, **{"runtimes/copy.yaml": RUNTIME})
    code, out, _ = cli("validate", "--repo", repo)
    assert code == 1
    assert "ClusterServingRuntime srt-small: duplicate object, also defined at" in out
    assert "runtime 'srt-small' is defined more than once" in out


def test_duplicates_nothing_managed_depends_on_are_warnings(cli, tmp_path):
    raw = SERVICE.replace("deploymentMode: OMENative", "deploymentMode: RawDeployment")
    repo = repo_with(tmp_path, service=raw, **{"services/copy.yaml": raw})
    code, out, _ = cli("validate", "--repo", repo)
    assert code == 0
    assert "warnings" in out and "duplicate object, also defined at" in out


def test_wrong_types_and_bad_names(cli, tmp_path):
    service = SERVICE.replace("name: small\n", "name: Small_One\n").replace(
        "minReplicas: 2", "minReplicas: two")
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path, service=service))
    assert code == 1
    assert "metadata.name: 'Small_One' does not match" in out
    assert "spec.engine.minReplicas: 'two' is not of type 'integer'" in out


def test_non_mapping_documents_and_missing_kind(cli, tmp_path):
    repo = repo_with(tmp_path, **{"a.yaml": "- 1\n- 2\n", "b.yaml": "apiVersion: v1\nname: x\n"})
    code, out, _ = cli("validate", "--repo", repo)
    assert code == 1
    assert "a.yaml:1: a manifest must be a mapping, found a list" in out
    assert "b.yaml:1: document has no apiVersion and kind" in out


def test_unmanaged_kinds_are_skipped_and_listed(cli, tmp_path):
    repo = repo_with(tmp_path, **{"ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n"
                                             "  name: demo\n"})
    code, out, _ = cli("validate", "--repo", repo)
    assert code == 0
    assert "Namespace demo" in out.split("skipped (kinds")[1]


def test_empty_repository_is_an_error(cli, tmp_path):
    code, out, _ = cli("validate", "--repo", str(tmp_path))
    assert code == 1
    assert "holds no InferenceService or runtime" in out


def test_missing_repository_is_an_error(cli, tmp_path):
    code, out, _ = cli("validate", "--repo", str(tmp_path / "nope"))
    assert code == 1
    assert "repository folder does not exist" in out


def test_invalid_operator_values_stop_the_run(cli, tmp_path):
    repo = repo_with(tmp_path, **{"ome-values.yaml": "ome:\n  controller:\n"
                                                     "    minReadySeconds: -30\n"})
    code, out, err = cli("resolve", "--repo", repo)
    assert code == 1 and out == ""
    assert err.strip() == ("omegitops: error: ome-values.yaml:3: invalid deploy config, "
                           "minReadySeconds must be >= 0, got -30")


def test_operator_values_with_wrong_types(cli, tmp_path):
    repo = repo_with(tmp_path, **{"ome-values.yaml": "- a\n- b\n"})
    code, _, err = cli("validate", "--repo", repo)
    assert code == 1
    assert "ome-values.yaml:1: (top level): ['a', 'b'] is not of type 'object'" in err


def test_operator_values_file_named_on_the_command_line_must_exist(cli, tmp_path):
    code, _, err = cli("validate", "--repo", repo_with(tmp_path), "--operator-values", "x.yaml")
    assert code == 1
    assert "x.yaml: operator values file not found" in err


# -- names derived from the service's ------------------------------------------------


def gang_service(name, replicas=1):
    return (SERVICE.replace("name: small\n", f"name: {name}\n")
            .replace("minReplicas: 2\n    maxReplicas: 2\n",
                     f"minReplicas: {replicas}\n    maxReplicas: {replicas}\n")
            + "    leader:\n      runner:\n        name: ome-container\n"
            + "    worker:\n      size: 2\n      runner:\n        name: ome-container\n")


@pytest.mark.parametrize("length, replicas, fits", [
    (45, 1, True), (46, 1, False), (47, 1, False),
    # Five Instances reach index 9 (each may have a replacement beside it); six reach 11.
    (45, 5, True), (45, 6, False), (44, 6, True),
])
def test_a_gang_name_must_leave_room_for_its_pod_hostnames(cli, tmp_path, length, replicas,
                                                          fits):
    name = "g" * length
    repo = repo_with(tmp_path, service=gang_service(name, replicas))
    code, out, _ = cli("validate", "--repo", repo, "-o", "json")
    report = json.loads(out)
    assert code == (0 if fits else 1), report["errors"]
    if fits:
        return
    (error,) = report["errors"]
    assert (error["path"], error["line"], error["object"], error["field"]) == (
        "services/small.yaml", 4, f"InferenceService demo/{name}", "metadata.name")
    index = 2 * replicas - 1
    hostname = f"{name}-engine-{index}-leader-0"
    assert error["message"].startswith(
        f"{length} characters is too long for OMENative component engine: its pod hostname "
        f"(spec.hostname) {hostname} would be {len(hostname)} characters, over the 63 of a "
        "DNS-1123 label")
    assert error["message"].endswith(
        f"; use a name of at most {45 if replicas <= 5 else 44} characters")


def test_a_service_name_must_start_with_a_letter(cli, tmp_path):
    service = SERVICE.replace("name: small\n", "name: 3b-chat\n")
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path, service=service))
    assert code == 1
    assert ("services/small.yaml:4: InferenceService demo/3b-chat: metadata.name: OMENative "
            "component engine's Service name 3b-chat-engine would not be a DNS-1035 label: it "
            "must start with a letter and hold only lower-case letters, digits and '-'") in out


def test_a_name_that_only_raw_deployment_uses_is_left_alone(cli, tmp_path):
    service = SERVICE.replace("name: small\n", "name: 3b-chat\n").replace(
        "deploymentMode: OMENative", "deploymentMode: RawDeployment")
    code, _, _ = cli("validate", "--repo", repo_with(tmp_path, service=service))
    assert code == 0


def test_validate_checks_the_longest_names_reconcile_makes(tmp_path):
    """The derived names validate checks come from the functions reconcile builds its
    objects with: every name a gang rollout writes (a replacement at a new index, the
    PodGroups, both Services, the revisions) is at most as long as its checked twin."""
    from omegitops.cluster.sim import SimCluster
    from omegitops.render.names import derived_names
    from tests.fleet import strategy, write_service
    from tests.scenario import Scenario

    repo = write_service(tmp_path / "repo", replicas=2, workers=2,
                         lifecycle=strategy(maxSurge=1, maxUnavailable=0))
    scenario = Scenario(tmp_path, repo, podgroups=True)
    (item,) = scenario.items()
    checked: dict[str, int] = {}
    for derived in derived_names("demo", "svc", item.lifecycle):
        checked[derived.what] = max(checked.get(derived.what, 0), len(derived.value))
    seen: dict[str, int] = {}

    def note(what, value):
        seen[what] = max(seen.get(what, 0), len(value))

    def watch(s):
        with SimCluster(s.path) as cluster:
            for pod in cluster.list_pods():
                note("pod name", pod["metadata"]["name"])
                note("pod hostname (spec.hostname)", pod["spec"]["hostname"])
                note("pod subdomain (spec.subdomain)", pod["spec"]["subdomain"])
                for key, value in pod["metadata"]["labels"].items():
                    # OME's labels come from the runtime's and the model's names, not the
                    # service's: validation checks them as the templates' labels.
                    if key not in OME_LABELS:
                        note(f"pod label {key}", value)
            for kind, what in (("Service", "Service name"), ("PodGroup", "PodGroup name"),
                               ("ControllerRevision", "ControllerRevision name"),
                               ("InferenceReplica", "InferenceReplica name")):
                for obj in cluster.list_objects(kind):
                    note(what, obj["metadata"]["name"])

    scenario.watches.append(watch)
    scenario.until_idle()
    write_service(repo, replicas=2, workers=2, image="sglang:v2",
                  lifecycle=strategy(maxSurge=1, maxUnavailable=0))
    scenario.until_idle()
    assert max(int(p["metadata"]["labels"]["ome.io/instance-index"])
               for p in scenario.pods()) >= 2  # a replacement took a new index
    assert seen.keys() <= checked.keys(), seen.keys() - checked.keys()
    assert {what: length for what, length in seen.items() if length > checked[what]} == {}


def test_a_service_without_a_namespace_is_a_warning_naming_it(cli, tmp_path):
    service = SERVICE.replace("  namespace: demo\n", "")
    assert service != SERVICE
    code, out, _ = cli("validate", "--repo", repo_with(tmp_path, service=service))
    assert code == 0, out
    assert "InferenceService small has no metadata.namespace: defaulted to default" in \
        out.split("warnings:")[1]


@pytest.mark.parametrize("repo", ["examples", "invalid"])
def test_a_reader_that_goes_away_is_no_success(tmp_path, repo):
    """`omegitops validate | head -1`: the pipe closed before the output was written is
    exit 1 every time, never 0 (it was 0 in about half the runs, on an invalid repository
    too), and Python says nothing of it on stderr."""
    import subprocess
    import sys

    from tests.conftest import EXAMPLES

    root = EXAMPLES if repo == "examples" else tmp_path
    if repo == "invalid":
        (tmp_path / "bad.yaml").write_text("apiVersion: ome.io/v1beta1\nkind: InferenceService\n"
                                           "metadata: {name: x}\nspec: {engine: 3}\n")
    for _ in range(3):
        reader, writer = os.pipe()
        os.close(reader)  # the reader is gone before anything is written
        done = subprocess.run([sys.executable, "-m", "omegitops", "validate", "--repo",
                               str(root)], stdout=writer, stderr=subprocess.PIPE, text=True,
                              check=False)
        os.close(writer)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def test_the_runtime_kind_is_honoured_and_named_in_the_error(tmp_path, cli):
    """spec.runtime.kind: ServingRuntime with only a ClusterServingRuntime of that name:
    the error says what was looked for, and where the runtime really is."""
    service = SERVICE.replace("  runtime:\n    name: srt-small\n",
                              "  runtime:\n    name: srt-small\n    kind: ServingRuntime\n")
    assert "kind: ServingRuntime" in service
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME, "svc.yaml": service})
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1
    assert "no ServingRuntime demo/srt-small (spec.runtime.kind: ServingRuntime)" in out + err
    assert "a ClusterServingRuntime srt-small exists" in out + err
    assert "and no ClusterServingRuntime" not in out + err


def test_a_disabled_runtime_is_refused_as_ome_refuses_it(tmp_path, cli):
    runtime = RUNTIME.replace("spec:\n", "spec:\n  disabled: true\n", 1)
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": runtime, "svc.yaml": SERVICE})
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 1
    assert "specified runtime srt-small is disabled" in out + err


def test_a_kind_list_is_read_item_by_item_as_kubectl_apply_reads_it(tmp_path, cli):
    """What ``kubectl get -o yaml`` writes: each item is an object, checked and placed
    at its own lines; an invalid service inside is not skipped with the whole List."""
    import yaml as pyyaml

    good = pyyaml.safe_load(SERVICE)
    bad = pyyaml.safe_load(SERVICE.replace("name: small\n", "name: broken\n"))
    bad["spec"]["engine"]["minReplicas"] = -3
    text = pyyaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [good, bad]},
                            sort_keys=False)
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME, "list.yaml": text})
    code, out, err = cli("validate", "--repo", str(repo), "-o", "json")
    assert code == 1, out + err
    report = json.loads(out)
    (error,) = [e for e in report["errors"] if "broken" in json.dumps(e)]
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "minReplicas: -3" in row)
    assert error["path"] == "list.yaml" and error["line"] == line, error
    assert "small" in json.dumps(report["valid"])


def test_an_unrendered_helm_placeholder_for_an_image_is_warned_about(tmp_path, cli):
    """The API server takes ``{{ .Values.image }}`` as an image, but the kubelet fails
    every pod of it as InvalidImageName: a warning, naming the image."""
    runtime = RUNTIME.replace("image: docker.io/lmsysorg/sglang:v0.5.5",
                              'image: "{{ .Values.image }}"')
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": runtime, "svc.yaml": SERVICE})
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 0, out + err
    assert "'{{ .Values.image }}', which is no image reference" in out + err
    assert "InvalidImageName" in out + err


@pytest.mark.parametrize("workers, warned", [(4999, False), (5000, True)])
def test_a_gang_wider_than_any_cluster_is_warned_about(tmp_path, cli, workers, warned):
    """A gang of 8-GPU pods needs a node per pod: past Kubernetes' 5,000 nodes no cluster
    the plan sizes holds one Instance (GangCannotFit). A gang scheduler would never start
    it, and without one its pods take GPUs from every other service."""
    runtime = RUNTIME.replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 8")
    service = SERVICE + f"    worker:\n      size: {workers}\n"
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": runtime, "svc.yaml": service})
    code, out, err = cli("validate", "--repo", str(repo))
    assert code == 0, out + err
    wanted = (f"GangCannotFit: one Instance of component engine ({workers + 1} pods) needs "
              f"{workers + 1} nodes, more than a Kubernetes cluster has (5000)")
    assert (wanted in out + err) is warned, out + err


def _lifecycles():
    """A component lifecycle of each shape the examples and the generated fleet hold."""
    import sys
    from pathlib import Path

    from omegitops.manifests.load import load, resolved_components

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import genfleet

    roots = [Path(__file__).resolve().parents[2] / "examples"]
    found = {}
    for root in roots:
        for item in resolved_components(load(root)):
            lc = item.lifecycle
            found.setdefault((lc.component, lc.shape, lc.worker_size, lc.replicas), lc)
    return found, genfleet


def test_a_plain_names_derived_names_are_judged_by_its_length(tmp_path):
    """derived_names_fit answers as the rendered names do, for plain names of every
    length near the limits, for names it cannot judge (False: rendered) and in any
    namespace (the names do not depend on it)."""
    import random

    from omegitops.manifests.load import load, resolved_components
    from omegitops.render.names import derived_names, derived_names_fit

    found, genfleet = _lifecycles()
    genfleet.write_fleet(tmp_path / "fleet", 8)
    for item in resolved_components(load(tmp_path / "fleet")):
        lc = item.lifecycle
        found.setdefault((lc.component, lc.shape, lc.worker_size, lc.replicas), lc)
    lifecycles = list(found.values()) + [
        lc.__class__(**{**lc.__dict__, "replicas": replicas})
        for lc in list(found.values())[:3] for replicas in (5, 6, 50)]
    rng = random.Random(7)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-"
    for lc in lifecycles:
        for length in [1, 2, 9, *range(38, 66), 120, 253]:
            middle = "".join(rng.choice(alphabet) for _ in range(max(0, length - 2)))
            name = ("q" + middle + "7")[:length] if length > 1 else "q"
            rendered = derived_names("team-a", name, lc)
            fits = not any(d.too_long or d.malformed for d in rendered)
            assert derived_names_fit(name, lc) == fits, (name, lc.component, lc.shape)
            assert [d.value for d in derived_names("another-namespace", name, lc)] == \
                [d.value for d in rendered]
        for odd in ("3b-chat", "a.b", "ab-", "Ab"):
            assert derived_names_fit(odd, lc) is False


def test_the_first_refused_template_name_is_the_first_the_full_list_refuses():
    """Validation asks only for the first name refused, judging each (rule, value) once
    per process: the same name, with the same words, as the whole list gives."""
    import random

    from omegitops.render.names import first_refused_template_name, template_names

    rng = random.Random(11)
    values = ["ok", "team-a", "Bad Value", "x" * 64, "-edge", "a.b/c", "ome.io/x", "", "7"]
    for _ in range(300):
        templates = {runner: {
            "metadata": {
                "labels": {rng.choice(values): rng.choice(values) for _ in range(3)},
                "annotations": {rng.choice(values): "v" for _ in range(2)}},
            "spec": {"containers": [{"name": rng.choice(values)}]}}
            for runner in rng.sample(["default", "leader", "worker", "every"], 2)}
        refused = [n for n in template_names(templates) if not n.rule.allows(n.value)]
        first = first_refused_template_name(templates)
        assert first == (refused[0] if refused else None)
        assert first is None or first.what == refused[0].what
