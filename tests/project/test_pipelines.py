"""The in-cluster job under ``pipelines/`` and the image it runs (``Dockerfile``).

Offline checks only:

* every document parses; Argo documents validate against the definition of
  their kind in Argo's JSON Schema (vendored under ``schemas/argo/``),
  once as the schema stands and once strictly (no unknown fields), and
  Kubernetes documents validate with kubernetes-validate, strictly;
* the scheduling and clean-up settings that keep one run at a time and
  bounded (Forbid, deadlines, history, TTLs, retries);
* credentials come from the Secret, never from a literal or the command line;
* the RBAC rules grant exactly ``schemas/rbac-requirements.yaml``, no
  wildcard, and names where Kubernetes allows them;
* the three job definitions run the same image with the same command line, their
  settings read from the one ConfigMap ``omegitops-settings``.

The Helm chart under ``pipelines/chart/`` is a template, not manifests: its output
is checked by tests/project/test_packaging.py.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from omegitops.app.shards import MAX_SHARDS, Shard
from omegitops.cli import build_parser
from omegitops.cluster.kube.access import INFERENCE_SERVICES, PASS, PODGROUPS, PRUNE, Permission
from omegitops.cluster.kube.cluster import APPLY_WORKERS, APPLY_WORKERS_ENV, apply_workers

REPO_ROOT = Path(__file__).resolve().parents[2]
PIPELINES = REPO_ROOT / "pipelines"
# Vendored from Argo Workflows (schemas/argo/README.md), so every clone checks it.
ARGO_SCHEMA = REPO_ROOT / "schemas" / "argo" / "schema.json"
REQUIREMENTS = REPO_ROOT / "schemas" / "rbac-requirements.yaml"
DOCKERFILE = REPO_ROOT / "Dockerfile"

ARGO_API_VERSION = "argoproj.io/v1alpha1"
ARGO_DEFINITION = "io.argoproj.workflow.v1alpha1.{kind}"
# The oldest Kubernetes the manifests must be valid for.
KUBERNETES_VERSION = "1.30"

IMAGE = "ghcr.io/omegitops/omegitops:0.1.0"
SERVICE_ACCOUNT = ("omegitops", "omegitops")  # (namespace, name)
GIT_SECRET = "omegitops-git"
# The job's command line once Kubernetes has expanded $(VAR) from the env.
EXPECTED_ARGV = [
    "omegitops", "reconcile",
    "--repo", "https://github.com/example/ome-manifests.git",
    "--branch", "main",
    "--cluster", "kube",
    "--until-idle",
    "--max-seconds", "900",
    "--report-dir", "status",
    "--report-branch", "omegitops-status",
    "--commit", "--push",
]


# -- loading ------------------------------------------------------------------


CHART = PIPELINES / "chart"
SETTINGS = "omegitops-settings"


def pipeline_files() -> list[Path]:
    return sorted(p for p in PIPELINES.rglob("*.yaml") if not p.is_relative_to(CHART))


@cache
def load_documents() -> tuple[tuple[str, dict], ...]:
    """Every non-empty YAML document under pipelines/, as (``file#index``, document)."""
    found = []
    for path in pipeline_files():
        with path.open(encoding="utf-8") as handle:
            for index, doc in enumerate(yaml.safe_load_all(handle)):
                if doc is not None:
                    found.append((f"{path.relative_to(REPO_ROOT)}#{index}", doc))
    return tuple(found)


def manifests() -> list[tuple[str, dict]]:
    """The documents that are Kubernetes objects."""
    return [(where, doc) for where, doc in load_documents() if "apiVersion" in doc]


def the(kind: str, name: str | None = None) -> dict:
    """The one document of ``kind`` under pipelines/ (named ``name``, when given; the
    unsharded WorkflowTemplate when there are two)."""
    if kind == "WorkflowTemplate" and name is None:
        name = "omegitops-reconcile"
    docs = [doc for _, doc in manifests() if doc["kind"] == kind
            and (name is None or doc["metadata"]["name"] == name)]
    assert len(docs) == 1, f"expected one {kind}, found {len(docs)}"
    return docs[0]


def requirements() -> dict:
    return yaml.safe_load(REQUIREMENTS.read_text(encoding="utf-8"))


def walk(node: Any) -> Iterator[Any]:
    """Every value in a document, depth first (dict keys included)."""
    yield node
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


# -- parsing --------------------------------------------------------------------


def test_the_expected_files_exist():
    names = {str(p.relative_to(PIPELINES)) for p in pipeline_files()}
    assert {
        "argo/workflowtemplate.yaml",
        "argo/workflowtemplate-sharded.yaml",
        "argo/cronworkflow.yaml",
        "argo/rbac-argo-executor.yaml",
        "common/namespace.yaml",
        "common/settings.yaml",
        "common/rbac.yaml",
        "cronjob/cronjob.yaml",
        "crds/inferencereplica-crd.yaml",
    } <= names
    assert REQUIREMENTS.is_file()
    assert (PIPELINES / "README.md").is_file()


@pytest.mark.parametrize("path", pipeline_files(), ids=lambda p: str(p.relative_to(PIPELINES)))
def test_every_file_parses_and_teaches(path: Path):
    text = path.read_text(encoding="utf-8")
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    assert docs, f"{path.name}: no YAML document"
    assert all(isinstance(d, dict) for d in docs)
    assert text.lstrip().startswith("#"), f"{path.name}: start with a comment saying what it is"


def test_every_manifest_has_a_kind_and_a_name():
    for where, doc in manifests():
        assert doc.get("kind"), where
        assert doc.get("metadata", {}).get("name"), where


# -- Argo documents against Argo's JSON Schema ------------------------------------


@cache
def argo_schema() -> dict:
    return json.loads(ARGO_SCHEMA.read_text(encoding="utf-8"))


def strict_definitions(definitions: dict) -> dict:
    """The definitions with unknown fields forbidden wherever fields are listed.

    Argo's schema never sets ``additionalProperties: false``, so as it stands a
    misspelt field (``podGc``) passes; this is kubernetes-validate's strict
    mode for Argo. Free-form maps (labels, resources) keep their own
    ``additionalProperties`` schema and are left alone.
    """
    strict = copy.deepcopy(definitions)
    for definition in strict.values():
        if "properties" in definition and "additionalProperties" not in definition:
            definition["additionalProperties"] = False
    return strict


def argo_validator(kind: str, strict: bool = False) -> jsonschema.protocols.Validator:
    """A validator rooted at the definition of ``kind``, with every definition
    available for its ``$ref``s, so that an error names the field at fault
    rather than "not valid under any of the given schemas" (the top-level oneOf)."""
    schema = argo_schema()
    definitions = schema["definitions"]
    name = ARGO_DEFINITION.format(kind=kind)
    assert name in definitions, f"no definition {name} in the Argo schema"
    root = {
        "$schema": schema["$schema"],
        "definitions": strict_definitions(definitions) if strict else definitions,
        "$ref": f"#/definitions/{name}",
    }
    return jsonschema.validators.validator_for(schema)(root)


def schema_errors(validator: jsonschema.protocols.Validator, doc: dict) -> list[str]:
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


def argo_documents() -> list[tuple[str, dict]]:
    return [(w, d) for w, d in manifests() if d["apiVersion"] == ARGO_API_VERSION]


def kubernetes_documents() -> list[tuple[str, dict]]:
    return [(w, d) for w, d in manifests() if d["apiVersion"] != ARGO_API_VERSION]


def test_there_are_argo_documents():
    kinds = sorted(d["kind"] for _, d in argo_documents())
    assert kinds == ["CronWorkflow", "WorkflowTemplate", "WorkflowTemplate"]


@pytest.mark.parametrize(("where", "doc"), argo_documents(), ids=[w for w, _ in argo_documents()])
def test_argo_document_matches_the_schema(where: str, doc: dict):
    errors = schema_errors(argo_validator(doc["kind"]), doc)
    assert not errors, f"{where}:\n" + "\n".join(errors)


@pytest.mark.parametrize(("where", "doc"), argo_documents(), ids=[w for w, _ in argo_documents()])
def test_argo_document_has_no_unknown_fields(where: str, doc: dict):
    errors = schema_errors(argo_validator(doc["kind"], strict=True), doc)
    assert not errors, f"{where}:\n" + "\n".join(errors)


def test_the_argo_validators_catch_mistakes():
    """The validators are wired right: they reject what Argo v4 would."""
    cron = copy.deepcopy(the("CronWorkflow"))
    cron["spec"]["schedule"] = cron["spec"].pop("schedules")[0]  # the pre-v3.6 field
    assert any("'schedules' is a required property" in e
               for e in schema_errors(argo_validator("CronWorkflow"), cron))

    template = copy.deepcopy(the("WorkflowTemplate"))
    template["spec"]["podGc"] = template["spec"].pop("podGC")
    assert schema_errors(argo_validator("WorkflowTemplate"), template) == []
    assert any("'podGc' was unexpected" in e
               for e in schema_errors(argo_validator("WorkflowTemplate", strict=True), template))


# -- Kubernetes documents with kubernetes-validate --------------------------------


@pytest.mark.parametrize(
    ("where", "doc"), kubernetes_documents(), ids=[w for w, _ in kubernetes_documents()]
)
def test_kubernetes_document_validates(where: str, doc: dict):
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        path = ".".join(map(str, err.path)) or "<root>"
        pytest.fail(f"{where}: {path}: {err.message}")


def test_kubernetes_validation_catches_mistakes():
    job = copy.deepcopy(the("CronJob"))
    job["spec"]["jobTemplate"]["spec"]["bakoffLimit"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


# -- scheduling, retries and clean-up ---------------------------------------------


def test_cron_workflow_schedules_every_five_minutes_one_at_a_time():
    spec = the("CronWorkflow")["spec"]
    assert "schedule" not in spec, "Argo v4 has `schedules` (a list) only"
    assert spec["schedules"] == ["*/5 * * * *"]
    assert spec["timezone"] == "UTC"
    assert spec["concurrencyPolicy"] == "Forbid"
    assert isinstance(spec["startingDeadlineSeconds"], int)
    assert spec["startingDeadlineSeconds"] > 0
    assert spec["successfulJobsHistoryLimit"] >= 1
    assert spec["failedJobsHistoryLimit"] >= 1


def test_cron_workflow_runs_the_template():
    cron = the("CronWorkflow")
    template = the("WorkflowTemplate")
    workflow = cron["spec"]["workflowSpec"]
    assert workflow["workflowTemplateRef"] == {"name": template["metadata"]["name"]}
    assert template["metadata"]["name"] == "omegitops-reconcile"
    assert cron["metadata"]["namespace"] == template["metadata"]["namespace"]
    declared = {p["name"] for p in template["spec"]["arguments"]["parameters"]}
    passed = {p["name"] for p in workflow["arguments"]["parameters"]}
    assert passed <= declared, f"undeclared parameters {passed - declared}"
    assert {"repo-url", "branch", "report-dir", "report-branch", "max-seconds"} <= declared


def test_workflow_template_is_bounded_and_cleaned_up():
    spec = the("WorkflowTemplate")["spec"]
    assert spec["serviceAccountName"] == "omegitops"
    assert spec["activeDeadlineSeconds"] > 900, "the deadline leaves room past --max-seconds"
    assert spec["podGC"]["strategy"] in {"OnPodSuccess", "OnPodCompletion",
                                         "OnWorkflowSuccess", "OnWorkflowCompletion"}
    assert spec["ttlStrategy"]["secondsAfterSuccess"] > 0
    assert spec["ttlStrategy"]["secondsAfterFailure"] > 0
    (template,) = [t for t in spec["templates"] if t["name"] == spec["entrypoint"]]
    retry = template["retryStrategy"]
    assert int(retry["limit"]) <= 1
    assert retry["retryPolicy"] == "OnError", "a failed reconcile waits for the next run"


def test_cronjob_is_bounded_and_cleaned_up():
    spec = the("CronJob")["spec"]
    assert spec["schedule"] == "*/5 * * * *"
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] > 0
    job = spec["jobTemplate"]["spec"]
    assert 0 <= job["backoffLimit"] <= 1
    assert job["ttlSecondsAfterFinished"] > 0
    assert job["activeDeadlineSeconds"] > 900
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == "omegitops"


# -- the container: same everywhere, non-root, bounded ------------------------------


def pod_settings() -> dict[str, tuple[dict, dict, dict[str, str]]]:
    """Per job definition: (pod-level settings, container, parameter values).

    The CronWorkflow's pod is the template's, with the CronWorkflow's arguments
    in place of the template's defaults.
    """
    template = the("WorkflowTemplate")["spec"]
    (entry,) = [t for t in template["templates"] if t["name"] == template["entrypoint"]]
    defaults = {p["name"]: p["value"] for p in template["arguments"]["parameters"]}
    cron = the("CronWorkflow")["spec"]["workflowSpec"]
    overrides = {p["name"]: parameter_value(p) for p in cron["arguments"]["parameters"]}
    job_pod = the("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (job_container,) = job_pod["containers"]
    return {
        "WorkflowTemplate": (template, entry["container"], defaults),
        "CronWorkflow": (template, entry["container"], {**defaults, **overrides}),
        "CronJob": (job_pod, job_container, {}),
    }


def settings() -> dict[str, str]:
    """The data of the ConfigMap the jobs read their settings from."""
    return the("ConfigMap", SETTINGS)["data"]


def parameter_value(parameter: dict) -> str:
    """An Argo parameter's value: literal, or read from the settings ConfigMap."""
    if "value" in parameter:
        return parameter["value"]
    ref = parameter["valueFrom"]["configMapKeyRef"]
    assert ref["name"] == SETTINGS, parameter
    return settings()[ref["key"]]


def literal_env(container: dict, parameters: dict[str, str]) -> dict[str, str]:
    """The container's env values as the kubelet sets them: the settings ConfigMap's
    keys (``envFrom``), then the literal env values over them, Argo
    ``{{workflow.parameters.x}}`` resolved."""
    def resolve(value: str) -> str:
        return re.sub(r"\{\{\s*workflow\.parameters\.([\w-]+)\s*\}\}",
                      lambda m: parameters[m.group(1)], value)

    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        assert source["configMapRef"]["name"] == SETTINGS, source
        env.update(settings())
    env.update({e["name"]: resolve(e["value"])
                for e in container.get("env", []) if "value" in e})
    return env


def effective_argv(container: dict, parameters: dict[str, str]) -> list[str]:
    """command + args as the kubelet runs them: $(VAR) replaced from the env."""
    env = literal_env(container, parameters)
    words = container["command"] + container["args"]
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], w) for w in words]


def test_the_three_jobs_run_the_same_command():
    jobs = pod_settings()
    argvs = {kind: effective_argv(c, p) for kind, (_, c, p) in jobs.items()}
    for kind, argv in argvs.items():
        assert argv == EXPECTED_ARGV, kind
    containers = [c for _, c, _ in jobs.values()]
    first = containers[0]
    for container in containers[1:]:
        for key in ("image", "command", "args", "workingDir", "resources",
                    "securityContext", "volumeMounts"):
            assert container[key] == first[key], key
        secret_env = [e for e in container["env"] if "valueFrom" in e and e["name"] != RUN]
        assert secret_env == [e for e in first["env"]
                              if "valueFrom" in e and e["name"] != RUN]
    assert first["image"] == IMAGE


RUN = "OMEGITOPS_RUN"


def test_each_job_names_the_run_its_retried_pods_are_attempts_of():
    """A retried pod waits out its lost predecessor's Lease only if both name one run:
    the Workflow's uid under Argo, the Job's under the CronJob (the pod's label)."""
    for kind, (_, container, _) in pod_settings().items():
        (run,) = [e for e in container["env"] if e["name"] == RUN]
        if "value" in run:
            assert run["value"] == "{{workflow.uid}}", kind
        else:
            assert run["valueFrom"] == {"fieldRef": {
                "fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}}, kind


def test_the_jobs_read_where_to_reconcile_from_one_configmap():
    """A user sets the repository once, in the ConfigMap, not by list index in a
    container's env or a workflow's parameters."""
    assert set(settings()) == {"REPO_URL", "BRANCH", "REPORT_DIR", "REPORT_BRANCH",
                               "MAX_SECONDS", "APPLY_WORKERS"}
    configmap = the("ConfigMap", SETTINGS)
    # Argo reads parameters only from ConfigMaps with this label.
    assert configmap["metadata"]["labels"]["workflows.argoproj.io/configmap-type"] \
        == "Parameter"
    container = pod_settings()["CronJob"][1]
    assert container["envFrom"] == [{"configMapRef": {"name": SETTINGS}}]
    assert not {e["name"] for e in container["env"]} & set(settings())
    cron = the("CronWorkflow")["spec"]["workflowSpec"]
    assert all("value" not in p for p in cron["arguments"]["parameters"])


def test_every_job_applies_as_many_plans_at_once_as_the_settings_say():
    """APPLY_WORKERS reaches each job's pods (the sharded template's shards too) as
    OMEGITOPS_APPLY_WORKERS, read by the kubelet from the ConfigMap; a ConfigMap kept
    from before the key existed leaves it unset, and omegitops its own default."""
    entry = {"name": APPLY_WORKERS_ENV, "valueFrom": {"configMapKeyRef": {
        "name": SETTINGS, "key": "APPLY_WORKERS", "optional": True}}}
    containers = {kind: container for kind, (_, container, _) in pod_settings().items()}
    sharded = the("WorkflowTemplate", "omegitops-reconcile-sharded")["spec"]
    (shard,) = [t for t in sharded["templates"] if t["name"] == "reconcile-shard"]
    containers["sharded"] = shard["container"]
    for kind, container in containers.items():
        assert entry in container["env"], kind
    assert apply_workers({APPLY_WORKERS_ENV: settings()["APPLY_WORKERS"]}) == APPLY_WORKERS
    assert apply_workers({}) == APPLY_WORKERS


def test_the_command_line_is_one_omegitops_accepts():
    """The job's argv parses with omegitops' own parser (once it has every flag)."""
    args, unknown = build_parser().parse_known_args(EXPECTED_ARGV[1:])
    if unknown:
        pytest.skip(f"omegitops reconcile does not take {' '.join(unknown)} yet")
    assert args.command == "reconcile"
    assert args.cluster == "kube" and args.until_idle and args.max_seconds == 900


def test_pods_are_non_root_and_bounded():
    for kind, (pod, container, _) in pod_settings().items():
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True, kind
        assert security["runAsUser"] == dockerfile_uid(), f"{kind}: the image's USER"
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}, kind
        assert pod["serviceAccountName"] == "omegitops", kind
        own = container["securityContext"]
        assert own["allowPrivilegeEscalation"] is False, kind
        assert own["readOnlyRootFilesystem"] is True, kind
        assert own["capabilities"]["drop"] == ["ALL"], kind
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][bound]), f"{kind}: {bound}"
        # A read-only root needs somewhere to clone to.
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert container["workingDir"] in mounts, kind


# -- credentials --------------------------------------------------------------------

# Shapes of real credentials; none may appear in any file of the job or of CI.
SECRET_PATTERNS = {
    "GitHub token": r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}",
    "GitHub fine-grained token": r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    "GitLab token": r"\bglpat-[A-Za-z0-9_-]{20,}",
    "Slack token": r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    "AWS access key": r"\bAKIA[0-9A-Z]{16}\b",
    "private key": r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    "credentials in a URL": r"[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:[^/\s@'\"]+@",
    "bearer token": r"(?i)bearer\s+[A-Za-z0-9._~+/-]{20,}",
}


def shipped_files() -> list[Path]:
    files = [p for p in PIPELINES.rglob("*") if p.is_file()]
    files += sorted((REPO_ROOT / ".github").rglob("*.yml"))
    files += [DOCKERFILE, REPO_ROOT / ".dockerignore"]
    return files


@pytest.mark.parametrize("path", shipped_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_credential_literal(path: Path):
    text = path.read_text(encoding="utf-8")
    for name, pattern in SECRET_PATTERNS.items():
        match = re.search(pattern, text)
        assert match is None, f"{path.name}: looks like a {name}: {match.group(0)[:12]}..."


def test_no_secret_objects_and_credentials_only_from_the_secret():
    assert not [w for w, d in manifests() if d["kind"] == "Secret"], "no Secret in Git"
    for kind, (_, container, _) in pod_settings().items():
        by_name = {e["name"]: e for e in container["env"]}
        for name in ("GIT_USERNAME", "GIT_TOKEN"):
            ref = by_name[name]["valueFrom"]["secretKeyRef"]
            assert ref["name"] == GIT_SECRET, f"{kind}: {name}"
        for env in container["env"]:
            if re.search(r"TOKEN|PASSWORD|SECRET|USERNAME|KEY", env["name"]):
                assert "value" not in env, f"{kind}: {env['name']} must come from the Secret"
        lease_namespace = by_name["OMEGITOPS_NAMESPACE"]["valueFrom"]["fieldRef"]
        assert lease_namespace == {"fieldPath": "metadata.namespace"}, kind
        words = " ".join(container["command"] + container["args"])
        assert "GIT_" not in words, f"{kind}: credentials never on the command line"



def test_the_jobs_carry_the_load_memo_signed_with_an_optional_secret():
    """The key that signs the load memo carried on the report branch comes from its own
    Secret, optional: a cluster without it runs every job cold, never fails to start."""
    for kind, (_, container, _) in pod_settings().items():
        by_name = {e["name"]: e for e in container["env"]}
        ref = by_name["OMEGITOPS_MEMO_KEY"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "omegitops-memo", "key": "key", "optional": True}, kind
        assert by_name["OMEGITOPS_CACHE_DIR"]["value"] == "", kind
        assert "--report-branch" in container["args"], kind


def secret_keys_read() -> set[str]:
    """The keys of the Secret ``omegitops-git`` that the three jobs read."""
    return {
        env["valueFrom"]["secretKeyRef"]["key"]
        for _, container, _ in pod_settings().values()
        for env in container["env"]
        if env.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == GIT_SECRET
    }


@pytest.mark.parametrize("doc", ["README.md", "docs/getting-started.md", "pipelines/README.md"])
def test_the_docs_create_the_secret_with_the_keys_the_jobs_read(doc: str):
    # A Secret made with other keys leaves the job's pod in CreateContainerConfigError.
    text = (REPO_ROOT / doc).read_text(encoding="utf-8")
    commands = re.findall(r"create secret generic omegitops-git((?:\\\n|[^\n])*)", text)
    for command in commands:
        assert set(re.findall(r"--from-literal=([\w.-]+)=", command)) == secret_keys_read(), doc
    if doc == "README.md":
        assert all(f"`{key}`" in text for key in secret_keys_read())
    else:
        assert commands, f"{doc} shows how to create the Secret"

# -- RBAC -----------------------------------------------------------------------------

Grant = tuple[str, str, str, str, tuple[str, ...]]  # (scope, group, resource, verb, names)


def granted(rules: list[dict], scope: str) -> set[Grant]:
    """Every (scope, apiGroup, resource, verb, resourceNames) a list of rules allows."""
    return {
        (scope, group, resource, verb, tuple(sorted(rule.get("resourceNames", []))))
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def required(entries: list[dict], scope: str) -> set[Grant]:
    return {
        (scope, e["apiGroup"], e["resource"], verb, tuple(sorted(e.get("resourceNames", []))))
        for e in entries
        for verb in e["verbs"]
    }


def rbac_documents(filename: str) -> list[dict]:
    """The documents of a file under pipelines/ (``common/rbac.yaml``)."""
    return [d for w, d in manifests() if w.startswith(f"pipelines/{filename}#")]


def roles_in(filename: str) -> set[Grant]:
    found: set[Grant] = set()
    for doc in rbac_documents(filename):
        if doc["kind"] in {"ClusterRole", "Role"}:
            found |= granted(doc["rules"], doc["kind"])
    return found


def test_rbac_grants_exactly_the_requirements():
    need = requirements()
    want = required(need["clusterWide"], "ClusterRole") | required(need["namespaced"], "Role")
    have = roles_in("common/rbac.yaml")
    assert have - want == set(), "granted but not required"
    assert want - have == set(), "required but not granted"


def test_argo_executor_rbac_grants_exactly_its_requirements():
    want = required(requirements()["argoExecutor"], "Role")
    assert roles_in("argo/rbac-argo-executor.yaml") == want


def test_no_wildcards_in_rbac():
    rules = [r for w, d in manifests() if "rules" in d for r in d["rules"]]
    rules += [e for key in ("clusterWide", "namespaced", "argoExecutor")
              for e in requirements()[key]]
    assert rules
    for rule in rules:
        for value in walk({k: v for k, v in rule.items() if k != "why"}):
            assert not (isinstance(value, str) and "*" in value), f"wildcard in {rule}"


def test_names_restrict_what_they_can():
    roles = rbac_documents("common/rbac.yaml") + rbac_documents("argo/rbac-argo-executor.yaml")
    rules = [r for d in roles if "rules" in d for r in d["rules"]]
    named = {(r["resources"][0], tuple(r["resourceNames"])): set(r["verbs"])
             for r in rules if "resourceNames" in r}
    leases = ("omegitops", *(Shard(i, MAX_SHARDS).lease_name for i in range(MAX_SHARDS)))
    assert named == {("leases", leases): {"get", "update"}}
    for rule in rules:
        # The git Secret is given to the pod (secretKeyRef), never read through the API.
        assert "secrets" not in rule["resources"], rule
        if "leases" in rule["resources"]:
            # Kubernetes cannot restrict create by name; everything else must be.
            assert "resourceNames" in rule or rule["verbs"] == ["create"], rule
        if "resourceNames" in rule:
            assert not {"create", "list", "watch"} & set(rule["verbs"]), (
                f"resourceNames cannot restrict create/list/watch: {rule}")


def test_bindings_bind_the_job_account_to_the_roles_beside_them():
    for filename in ("common/rbac.yaml", "argo/rbac-argo-executor.yaml"):
        docs = rbac_documents(filename)
        roles = {(d["kind"], d["metadata"]["name"]) for d in docs if "rules" in d}
        bindings = [d for d in docs if "roleRef" in d]
        assert len(bindings) == len(roles), filename
        for binding in bindings:
            ref = binding["roleRef"]
            assert (ref["kind"], ref["name"]) in roles, f"{filename}: {ref}"
            assert binding["kind"] == ("ClusterRoleBinding" if ref["kind"] == "ClusterRole"
                                       else "RoleBinding")
            subjects = {(s["kind"], s["namespace"], s["name"]) for s in binding["subjects"]}
            assert subjects == {("ServiceAccount", *SERVICE_ACCOUNT)}, filename
    account = the("ServiceAccount")["metadata"]
    assert (account["namespace"], account["name"]) == SERVICE_ACCOUNT
    need = requirements()["serviceAccount"]
    assert (need["namespace"], need["name"]) == SERVICE_ACCOUNT


def test_every_requirement_says_why():
    need = requirements()
    for key in ("clusterWide", "namespaced", "argoExecutor"):
        for entry in need[key]:
            assert entry.get("why"), entry
            assert entry["verbs"] and len(set(entry["verbs"])) == len(entry["verbs"]), entry


def test_the_permissions_a_run_asks_about_are_granted():
    """What the backend asks the API server before its first write
    (omegitops/cluster/kube/access.py) is granted in every namespace, by one rule
    that names no objects."""
    need = requirements()
    for permission in (*PASS, *PODGROUPS, *INFERENCE_SERVICES, *PRUNE):
        assert isinstance(permission, Permission)
        resource = permission.resource + (
            f"/{permission.subresource}" if permission.subresource else "")
        rules = [rule for rule in need["clusterWide"]
                 if (rule["apiGroup"], rule["resource"]) == (permission.group, resource)
                 and permission.verb in rule["verbs"] and "resourceNames" not in rule]
        assert len(rules) == 1, permission


# -- the image ------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def dockerfile_uid() -> int:
    users = [args for op, args in dockerfile_instructions() if op == "USER"]
    assert users, "the image must switch to a non-root USER"
    user = users[-1].split(":")[0]
    assert user.isdigit(), "a numeric USER, so that runAsNonRoot can verify it"
    return int(user)


def test_image_is_pinned_non_root_and_runs_omegitops():
    instructions = dockerfile_instructions()
    (base,) = [args for op, args in instructions if op == "FROM"]
    assert base == "${BASE_IMAGE}", base
    # Before the FROM, the base's default: a release pinned by digest.
    (default,) = [args for op, args in instructions[:instructions.index(("FROM", base))]
                  if op == "ARG" and args.startswith("BASE_IMAGE=")]
    assert re.fullmatch(r"BASE_IMAGE=python:3\.11\.\d+-slim-\w+@sha256:[0-9a-f]{64}",
                        default), default
    assert dockerfile_uid() != 0
    entrypoints = [args for op, args in instructions if op == "ENTRYPOINT"]
    assert entrypoints and json.loads(entrypoints[-1]) == ["omegitops"]
    runs = " ".join(args for op, args in instructions if op == "RUN")
    assert "pip install --no-cache-dir --no-deps --no-build-isolation '.[all]'" in runs
    assert re.search(r"apt-get install .*\bgit\b", runs), "GitPython needs the git binary"
    ignored = (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert ignored and "*" in ignored, ".dockerignore is an allow-list"


def test_the_sharded_template_fans_out_and_merges_once():
    """Each shard runs `reconcile --shard I/N` with the unsharded job's flags but the
    commit; the last step merges exactly N reports and commits and pushes once."""
    spec = the("WorkflowTemplate", "omegitops-reconcile-sharded")["spec"]
    templates = {t["name"]: t for t in spec["templates"]}
    (fan_out,), (merge,) = templates[spec["entrypoint"]]["steps"]
    assert fan_out["withSequence"]["count"] == "{{workflow.parameters.shards}}"
    assert merge["template"] == "merge-reports"
    defaults = {p["name"]: p["value"] for p in spec["arguments"]["parameters"]}
    assert 1 <= int(defaults["shards"]) <= MAX_SHARDS
    assert spec["synchronization"] == the("WorkflowTemplate")["spec"]["synchronization"]

    def argv(template: str, index: str = "0") -> list[str]:
        container = templates[template]["container"]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        env = {k: v.replace("{{inputs.parameters.index}}", index) for k, v in env.items()}
        env = {k: re.sub(r"\{\{workflow\.parameters\.([\w-]+)\}\}",
                         lambda m: defaults[m.group(1)], v) for k, v in env.items()}
        words = container["command"] + container["args"]
        return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], w) for w in words]

    shard = argv("reconcile-shard", "3")
    assert shard[shard.index("--shard") + 1] == f"3/{defaults['shards']}"
    assert "--commit" not in shard and "--push" not in shard
    args = build_parser().parse_args(shard[1:])
    assert args.until_idle and args.cluster == "kube" and args.report_dir == "/work/report"
    merged = argv("merge-reports")
    args = build_parser().parse_args(merged[1:])
    assert args.command == "merge-reports" and args.commit and args.push
    assert args.expect == int(defaults["shards"])
    output = templates["reconcile-shard"]["outputs"]["artifacts"][0]
    given = templates["merge-reports"]["inputs"]["artifacts"][0]
    assert output["path"] == "/work/report"
    assert output["s3"]["key"].startswith(given["s3"]["key"] + "/")


def test_the_plans_forecast_runs_at_the_shipped_cadence():
    """``plan`` forecasts a rollout run by run, as the shipped job runs it: the same
    schedule and --max-seconds as the CronJob, the CronWorkflow and its template."""
    from omegitops.preview.cadence import SHIPPED_JOB_SECONDS, SHIPPED_SCHEDULE

    assert the("CronJob")["spec"]["schedule"] == SHIPPED_SCHEDULE
    assert the("CronWorkflow")["spec"]["schedules"] == [SHIPPED_SCHEDULE]
    assert EXPECTED_ARGV[EXPECTED_ARGV.index("--max-seconds") + 1] == f"{SHIPPED_JOB_SECONDS:.0f}"
    for kind, (_, container, parameters) in pod_settings().items():
        argv = effective_argv(container, parameters)
        assert "--until-idle" in argv, kind
        assert float(argv[argv.index("--max-seconds") + 1]) == SHIPPED_JOB_SECONDS, kind
