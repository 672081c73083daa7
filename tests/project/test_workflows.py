"""The GitHub Actions workflows under ``.github/workflows/``, checked offline.

* each validates against the GitHub workflow schema that check-jsonschema
  vendors (no network);
* every action is pinned by a full commit SHA, with the version in a comment;
* permissions are declared, at the top and on every job, and minimal;
* ci.yml runs exactly the README's test command;
* plan.yml runs the repository's own plan Action (action.yml) on examples/;
* release.yml publishes to PyPI by trusted publishing and pushes the image to ghcr.
"""

from __future__ import annotations

import importlib.resources
import json
import re
from functools import cache
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO_ROOT / ".github" / "workflows"
README = REPO_ROOT / "README.md"

# A pinned step: `uses: owner/repo[/path]@<40 hex> # v1.2.3`.
PINNED = re.compile(r"uses:\s*[\w.-]+/[\w./-]+@[0-9a-f]{40}\s+#\s*v\d+(\.\d+)*\s*$")


class WorkflowLoader(yaml.SafeLoader):
    """YAML 1.2 booleans only: PyYAML (YAML 1.1) reads the key ``on`` as True."""


WorkflowLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
WorkflowLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def workflow_files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.yml")) + sorted(WORKFLOWS.glob("*.yaml"))


def load(path: Path) -> dict:
    # WorkflowLoader is a SafeLoader: no arbitrary Python objects.
    return yaml.load(path.read_text(encoding="utf-8"), Loader=WorkflowLoader)


def workflow(name: str) -> dict:
    return load(WORKFLOWS / name)


def steps(doc: dict) -> list[dict]:
    return [step for job in doc["jobs"].values() for step in job.get("steps", [])]


@cache
def github_workflow_schema() -> dict:
    """The schema check-jsonschema ships for ``--builtin-schema vendor.github-workflows``."""
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads(vendor.joinpath("github-workflows.json").read_text(encoding="utf-8"))


def test_both_workflows_exist():
    assert {p.name for p in workflow_files()} >= {"ci.yml", "plan.yml"}


def test_the_loader_keeps_on_as_a_key():
    assert "on" in workflow("ci.yml") and True not in workflow("ci.yml")


def schema_errors(doc: dict) -> list[str]:
    schema = github_workflow_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_workflow_matches_the_github_schema(path: Path):
    messages = schema_errors(load(path))
    assert not messages, f"{path.name}:\n" + "\n".join(messages)


def test_the_github_schema_catches_mistakes():
    plan = workflow("plan.yml")
    plan["permissions"]["pull-requests"] = "admin"
    assert schema_errors(plan)
    del plan["jobs"]
    assert any("'jobs' is a required property" in m for m in schema_errors(plan))


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_every_action_is_pinned_by_sha(path: Path):
    lines = [line.strip().lstrip("- ") for line in path.read_text(encoding="utf-8").splitlines()]
    uses = [line for line in lines if line.startswith("uses:")]
    for line in uses:
        if line == "uses: ./":  # this repository's own Action, as the commit has it
            continue
        assert PINNED.match(line), f"{path.name}: pin by full commit SHA with a # vX.Y.Z: {line}"
    # And the parsed view agrees with the text: no `uses:` the scan above missed.
    assert len(uses) == sum("uses" in step for step in steps(load(path)))


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_every_job_is_bounded(path: Path):
    # The whole suite takes about 40 minutes on two cores: the jobs that run it stop at 90.
    for name, job in load(path)["jobs"].items():
        suite = any("pytest" in step.get("run", "") for step in job.get("steps", []))
        assert 0 < job.get("timeout-minutes", 0) <= (90 if suite else 30), f"{path.name}: {name}"


def test_the_suite_has_the_time_it_takes():
    (job,) = [j for j in workflow("ci.yml")["jobs"].values() if "matrix" in j.get("strategy", {})]
    assert job["timeout-minutes"] == 90


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_superseded_runs_are_cancelled(path: Path):
    concurrency = load(path)["concurrency"]
    assert concurrency["cancel-in-progress"] is True
    assert "github." in concurrency["group"]


# -- permissions -----------------------------------------------------------------------


def declared_permissions(doc: dict) -> list[tuple[str, dict]]:
    """The top-level permissions and each job's, which must all be spelt out."""
    found = [("<top>", doc.get("permissions"))]
    found += [(name, job.get("permissions")) for name, job in doc["jobs"].items()]
    for where, permissions in found:
        assert isinstance(permissions, dict), f"{where}: declare permissions as a map"
    return found


def test_ci_only_reads():
    for where, permissions in declared_permissions(workflow("ci.yml")):
        assert permissions == {"contents": "read"}, where


def test_plan_reads_code_and_writes_pull_requests_only():
    for where, permissions in declared_permissions(workflow("plan.yml")):
        assert permissions == {"contents": "read", "pull-requests": "write"}, where


def test_checkouts_do_not_keep_the_token():
    for path in workflow_files():
        for step in steps(load(path)):
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, path.name


# -- ci.yml ------------------------------------------------------------------------------


def readme_test_command() -> str:
    """The second command of the README's first ```sh block."""
    match = re.search(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert match, "README.md has no ```sh block"
    commands = [line.strip() for line in match.group(1).splitlines() if line.strip()]
    assert len(commands) >= 2, commands
    return commands[1]


def test_ci_runs_exactly_the_readme_test_command():
    command = readme_test_command()
    assert command == "python3 -m pip install -q -e '.[test]' && python3 -m pytest -q"
    (job,) = [j for j in workflow("ci.yml")["jobs"].values() if "matrix" in j.get("strategy", {})]
    runs = [step["run"].strip() for step in job["steps"] if "run" in step]
    assert runs == [command]


def test_ci_tests_on_python_3_11_and_3_12():
    ci = workflow("ci.yml")
    (job,) = [j for j in ci["jobs"].values() if "matrix" in j.get("strategy", {})]
    assert job["strategy"]["matrix"]["python-version"] == ["3.11", "3.12"]
    setup = [s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    assert setup and setup[0]["with"]["python-version"] == "${{ matrix.python-version }}"
    assert ci["on"]["push"]["branches"] == ["main"]
    assert ci["on"]["pull_request"]["branches"] == ["main"]


def test_ci_lints_argo_when_the_cli_installs():
    jobs = workflow("ci.yml")["jobs"]
    (lint_job,) = [j for j in jobs.values() if any("argo lint" in s.get("run", "")
                                                   for s in j["steps"])]
    install = next(s for s in lint_job["steps"] if s.get("id") == "install-argo")
    lint = next(s for s in lint_job["steps"] if "argo lint" in s.get("run", ""))
    assert install["continue-on-error"] is True
    assert lint["if"] == "steps.install-argo.outcome == 'success'"
    assert lint.get("continue-on-error", False) is False
    assert lint["run"].strip() == "argo lint --offline pipelines/argo/"


# -- plan.yml ------------------------------------------------------------------------------
# The plan's own steps are the Action's (action.yml): tests/project/test_action.py.


def test_plan_runs_on_pull_requests_touching_manifests_or_the_planner():
    plan = workflow("plan.yml")
    assert set(plan["on"]) == {"pull_request"}, "never pull_request_target: PR code is untrusted"
    paths = plan["on"]["pull_request"]["paths"]
    # This repository's manifests are examples/; tests/manifests/corpus/ is broken on purpose.
    assert {"examples/**.yaml", "examples/**.yml", "omegitops/**", "action.yml"} <= set(paths)
    assert not any(p.startswith("tests/") for p in paths)
    assert "${{ github.event.pull_request.number }}" in plan["concurrency"]["group"]


def test_plan_runs_the_repositorys_own_action_on_its_examples_with_its_own_code():
    (job,) = workflow("plan.yml")["jobs"].values()
    (checkout, action) = job["steps"]
    assert checkout["uses"].startswith("actions/checkout@")
    assert checkout["with"]["fetch-depth"] == 0  # the base branch and its report's commit
    assert action == {"uses": "./", "with": {"manifests": "examples", "package": ".[git]"}}


# -- release.yml -----------------------------------------------------------------------


def release_jobs() -> dict[str, dict]:
    return workflow("release.yml")["jobs"]


def test_a_release_builds_from_a_version_tag_the_image_the_pipelines_run():
    release = workflow("release.yml")
    assert release["on"] == {"push": {"tags": ["v*.*.*"]}}
    script = "\n".join(step.get("run", "") for step in steps(release))
    # The tag must be pyproject's version, and the pipelines and the Action must name it.
    assert 'tag="${GITHUB_REF_NAME#v}"' in script and '"$tag" != "$version"' in script
    assert 'grep -rqF "${IMAGE}:${version}" pipelines/' in script
    assert "action.yml" in script
    assert "python3 -m build" in script and "docker push" in script
    assert 'validate --repo /repo' in script, "the released image is run before it is pushed"
    version = re.search(r'^version = "(.+)"$', (REPO_ROOT / "pyproject.toml").read_text(),
                        re.MULTILINE).group(1)
    chart = REPO_ROOT / "pipelines" / "chart"
    images = set(re.findall(r"image:\s*(\S+)", "\n".join(
        p.read_text() for p in (REPO_ROOT / "pipelines").rglob("*.yaml")
        if chart not in p.parents)))
    assert images == {f"{release['env']['IMAGE']}:{version}"}
    # The chart names the same image: its repository, at its appVersion by default.
    values = yaml.safe_load((chart / "omegitops" / "values.yaml").read_text())
    meta = yaml.safe_load((chart / "omegitops" / "Chart.yaml").read_text())
    assert values["image"]["repository"] == release["env"]["IMAGE"]
    assert values["image"]["tag"] in ("", version) and meta["appVersion"] == version


def test_a_release_publishes_to_pypi_by_trusted_publishing():
    """PyPI's trusted publishing: the publishing job alone may ask for an OIDC token,
    in an environment PyPI's publisher names, with no password or token stored."""
    jobs = release_jobs()
    (publishing,) = [name for name, job in jobs.items()
                     if any(s.get("uses", "").startswith("pypa/gh-action-pypi-publish@")
                            for s in job["steps"])]
    job = jobs[publishing]
    assert job["permissions"] == {"id-token": "write"}
    assert job["environment"]["name"] == "pypi"
    assert "build" in job["needs"]
    (publish,) = [s for s in job["steps"] if s["uses"].startswith("pypa/gh-action-pypi-publish@")]
    assert not {"password", "user"} & set(publish.get("with", {}))
    assert "secrets." not in json.dumps(job)
    # What it uploads is the build job's python-dist: the wheel and sdist, no krew zip.
    (download,) = [s for s in job["steps"] if s["uses"].startswith("actions/download-artifact@")]
    assert download["with"]["name"] == "python-dist"
    assert download["with"]["path"] == publish["with"]["packages-dir"]
    for name, other in jobs.items():
        if name != publishing:
            assert "id-token" not in other["permissions"], name


def test_a_release_pushes_the_image_to_ghcr_and_then_makes_the_github_release():
    jobs = release_jobs()
    (image,) = [j for j in jobs.values() if "docker push" in "".join(
        s.get("run", "") for s in j["steps"])]
    assert image["permissions"] == {"contents": "read", "packages": "write"}
    assert workflow("release.yml")["env"]["IMAGE"].startswith("ghcr.io/")
    (release,) = [j for j in jobs.values() if "gh release create" in "".join(
        s.get("run", "") for s in j["steps"])]
    assert release["permissions"] == {"contents": "write"}
    assert {"pypi", "image"} <= set(release["needs"])


def run_scripts() -> list[tuple[str, str]]:
    """Every ``run:`` of the workflows and of the Action, by file."""
    found = [(path.name, step["run"]) for path in workflow_files()
             for step in steps(load(path)) if "run" in step]
    action = load(REPO_ROOT / "action.yml")
    found += [("action.yml", step["run"]) for step in action["runs"]["steps"] if "run" in step]
    return found


def test_no_expression_is_pasted_into_a_script():
    """zizmor's template-injection: ``${{ github.actor }}`` (or any expression) inside a
    ``run:`` is expanded into the script's text before the shell reads it; values go
    through the step's ``env:`` instead."""
    for where, script in run_scripts():
        assert "${{" not in script, f"{where}: pass it through env: {script[:200]}"
