"""The packaging for GitOps: the Kustomize bases ``pipelines/cronjob`` and
``pipelines/argo`` and the Helm chart ``pipelines/chart/omegitops``.

Built with the real tools: kubectl's kustomize (the kubectl that
``tests/controlplane/build.sh`` builds) and Helm built from its Go module
(``build.sh helm``). When both are in the build cache these tests run with the
offline suite; when either is missing they are marked ``controlplane``, whose runs
build them.

* each base holds exactly the objects of its scheduler, and a user's one patch of
  the settings ConfigMap (the one pipelines/README.md shows) configures it;
* ``helm lint --strict`` passes for both schedulers, and the values schema
  refuses what it should;
* the chart renders, for each scheduler, the very objects its base does;
* what the chart renders validates: Kubernetes kinds with kubernetes-validate
  (strict), Argo kinds against Argo's JSON Schema. (kubeconform, the usual tool,
  is not served as a Go module here; kubernetes-validate reads the same
  Kubernetes OpenAPI schemas.)

The control plane applies both, unchanged: tests/controlplane/test_packaging_applied.py.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import test_pipelines
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
PIPELINES = REPO_ROOT / "pipelines"
CHART = PIPELINES / "chart" / "omegitops"
BUILD = REPO_ROOT / "tests" / "controlplane" / "build.sh"
NAMESPACE = "omegitops"
SCHEDULERS = ("cronjob", "argo")
# How pipelines/README.md's overlay names the base.
REMOTE_BASE = "https://github.com/omegitops/omegitops//pipelines/cronjob?ref=v0.1.0"

COMMON = {
    ("Namespace", "omegitops"),
    ("ConfigMap", "omegitops-settings"),
    ("ServiceAccount", "omegitops"),
    ("ClusterRole", "omegitops"),
    ("ClusterRoleBinding", "omegitops"),
    ("Role", "omegitops"),
    ("RoleBinding", "omegitops"),
    ("CustomResourceDefinition", "inferencereplicas.ome.io"),
}
EXPECTED = {
    "cronjob": COMMON | {("CronJob", "omegitops-reconcile")},
    "argo": COMMON | {
        ("Role", "omegitops-argo-executor"),
        ("RoleBinding", "omegitops-argo-executor"),
        ("WorkflowTemplate", "omegitops-reconcile"),
        ("CronWorkflow", "omegitops-reconcile"),
    },
}


# -- the tools, from the build cache --------------------------------------------------


def cached(tool: str) -> Path:
    """Where build.sh puts ``tool`` (kubectl with the control plane, helm alone), as
    ``build.sh where`` says: the script owns its cache key."""
    args = ["bash", str(BUILD), "where", *(["helm"] if tool == "helm" else [])]
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    return Path(done.stdout.strip()) / tool


def build(tool: str) -> Path:
    """``tool``, built by build.sh when it is not in the cache yet."""
    if not cached(tool).is_file():
        args = ["bash", str(BUILD), *(["helm"] if tool == "helm" else [])]
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"build.sh {args[2:]}: {done.stderr[-4000:]}"
    assert cached(tool).is_file(), f"build.sh did not make {cached(tool)}"
    return cached(tool)


if not (cached("helm").is_file() and cached("kubectl").is_file()):
    pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="module")
def kubectl() -> Path:
    return build("kubectl")


@pytest.fixture(scope="module")
def helm() -> Path:
    return build("helm")


def run(*args: object, cwd: Path = REPO_ROOT, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          check=False, env={**os.environ, "HELM_CACHE_HOME": "/nonexistent",
                                            "KUBECONFIG": "/dev/null"})
    if check:
        assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
    return done


def documents(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(kubectl: Path, folder: Path) -> list[dict]:
    return documents(run(kubectl, "kustomize", folder).stdout)


def template(helm: Path, *values: str) -> list[dict]:
    """``helm template`` of the chart, CRDs included, as Argo CD renders it."""
    sets = [a for v in values for a in ("--set", v)]
    return documents(run(helm, "template", "omegitops", CHART, "--namespace", NAMESPACE,
                         "--include-crds", *sets).stdout)


def by_key(objects: list[dict]) -> dict[tuple[str, str], dict]:
    keyed = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(keyed) == len(objects), "two objects of one kind and name"
    return keyed


# -- the Kustomize bases --------------------------------------------------------------


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_each_base_holds_its_scheduler_and_what_it_needs(kubectl, scheduler):
    objects = by_key(kustomize(kubectl, PIPELINES / scheduler))
    assert set(objects) == EXPECTED[scheduler]
    for (kind, _), obj in objects.items():
        if kind not in {"Namespace", "ClusterRole", "ClusterRoleBinding",
                        "CustomResourceDefinition"}:
            assert obj["metadata"]["namespace"] == NAMESPACE, kind


def readme_overlay() -> str:
    """The kustomization pipelines/README.md shows a user writing."""
    text = (PIPELINES / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"<!-- overlay -->\n```yaml\n(.*?)```", text, re.DOTALL)
    return block


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_the_readmes_one_patch_configures_either_base(kubectl, scheduler, tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(PIPELINES / scheduler, overlay)
    text = readme_overlay().replace(REMOTE_BASE,
                                    base)
    assert base in text, "the README's overlay names the base by its remote URL"
    (overlay / "kustomization.yaml").write_text(text, encoding="utf-8")
    objects = by_key(kustomize(kubectl, overlay))
    assert set(objects) == EXPECTED[scheduler]
    settings = objects[("ConfigMap", "omegitops-settings")]["data"]
    assert settings["REPO_URL"] == "https://git.example.com/platform/ome-manifests.git"
    assert settings["BRANCH"] == "main"
    # Everything else is the base's, unchanged.
    shipped = by_key(kustomize(kubectl, PIPELINES / scheduler))
    for key, obj in objects.items():
        if key[0] != "ConfigMap":
            assert obj == shipped[key], key


def test_there_is_no_manifest_at_the_top_of_pipelines():
    """``kubectl apply -f pipelines/`` would apply what lies there: nothing is, so a
    scheduler is always chosen by its folder (pipelines/README.md)."""
    assert not [p.name for p in PIPELINES.iterdir()
                if p.suffix in {".yaml", ".yml", ".json"}]


# -- the Helm chart -------------------------------------------------------------------


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_helm_lint_passes(helm, scheduler):
    done = run(helm, "lint", "--strict", CHART, "--namespace", NAMESPACE,
               "--set", f"scheduler={scheduler}")
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_the_chart_renders_what_the_base_applies(helm, kubectl, scheduler):
    rendered = by_key(template(helm, f"scheduler={scheduler}"))
    base = by_key(kustomize(kubectl, PIPELINES / scheduler))
    assert set(rendered) == set(base)
    for key, obj in rendered.items():
        assert obj == base[key], key


def test_the_values_set_the_settings_image_and_namespace(helm):
    rendered = by_key(template(helm, "settings.repoUrl=https://git.example.com/m.git",
                               "settings.maxSeconds=600", "settings.applyWorkers=2",
                               "image.tag=0.2.0", "namespace.enforce=restricted"))
    data = rendered[("ConfigMap", "omegitops-settings")]["data"]
    assert data["REPO_URL"] == "https://git.example.com/m.git"
    assert data["MAX_SECONDS"] == "600"
    assert data["APPLY_WORKERS"] == "2"
    pod = rendered[("CronJob", "omegitops-reconcile")]["spec"]["jobTemplate"]["spec"]
    assert pod["template"]["spec"]["containers"][0]["image"].endswith(":0.2.0")
    labels = rendered[("Namespace", NAMESPACE)]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    without = by_key(template(helm, "namespace.create=false"))
    assert ("Namespace", NAMESPACE) not in without


@pytest.mark.parametrize(("value", "field"), [
    ("scheduler=both", "scheduler"),
    ("settings.repoUrl=https://user:token@git.example.com/m.git", "repoUrl"),
    ("settings.maxSeconds=5000", "maxSeconds"),
    ("settings.applyWorkers=0", "applyWorkers"),
    ("settings.applyWorkers=65", "applyWorkers"),
    ("image.pullPolicy=Sometimes", "pullPolicy"),
    ("replicas=2", "replicas"),
])
def test_the_values_schema_refuses(helm, value, field):
    done = run(helm, "template", "omegitops", CHART, "--set", value, check=False)
    assert done.returncode != 0, done.stdout
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert field in done.stderr, done.stderr


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_what_the_chart_renders_validates(helm, scheduler):
    for obj in template(helm, f"scheduler={scheduler}"):
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["apiVersion"] == test_pipelines.ARGO_API_VERSION:
            validator = test_pipelines.argo_validator(obj["kind"], strict=True)
            errors = test_pipelines.schema_errors(validator, obj)
            assert not errors, f"{where}:\n" + "\n".join(errors)
            continue
        try:
            kubernetes_validate.validate(obj, test_pipelines.KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{where}: {'.'.join(map(str, err.path))}: {err.message}")


def test_the_chart_carries_the_generated_crd():
    """A chart cannot read files outside itself: crds/generate.py writes both copies."""
    shipped = PIPELINES / "crds" / "inferencereplica-crd.yaml"
    assert (CHART / "crds" / shipped.name).read_text() == shipped.read_text()


def test_the_chart_and_crd_versions_agree_with_the_image():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert test_pipelines.IMAGE.endswith(f":{chart['appVersion']}")
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'version = "{chart["appVersion"]}"' in pyproject
