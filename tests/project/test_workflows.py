"""The GitHub Actions workflows under ``.github/workflows/``, checked offline.

* each validates against the GitHub workflow schema that check-jsonschema
  vendors (no network);
* every action is pinned by a full commit SHA, with the version in a comment;
* permissions are declared, at the top and on every job, and minimal;
* ci.yml runs exactly the README's test command;
* plan.yml runs ``omegitops plan`` and keeps ONE comment per pull request,
  found by its hidden marker and updated in place.
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
PLAN_MARKER = "<!-- omegitops-plan -->"

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
        assert PINNED.match(line), f"{path.name}: pin by full commit SHA with a # vX.Y.Z: {line}"
    # And the parsed view agrees with the text: no `uses:` the scan above missed.
    assert len(uses) == sum("uses" in step for step in steps(load(path)))


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_every_job_is_bounded(path: Path):
    for name, job in load(path)["jobs"].items():
        assert 0 < job.get("timeout-minutes", 0) <= 30, f"{path.name}: {name}"


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


def test_plan_runs_on_pull_requests_touching_manifests():
    plan = workflow("plan.yml")
    assert set(plan["on"]) == {"pull_request"}, "never pull_request_target: PR code is untrusted"
    paths = plan["on"]["pull_request"]["paths"]
    # This repository's manifests are examples/; tests/manifests/corpus/ is broken on purpose.
    assert paths == ["examples/**.yaml", "examples/**.yml"]
    assert "${{ github.event.pull_request.number }}" in plan["concurrency"]["group"]


def test_plan_runs_omegitops_plan_into_the_summary():
    runs = "\n".join(step.get("run", "") for step in steps(workflow("plan.yml")))
    assert ('omegitops plan --repo "$MANIFESTS" --base "$BASE" --report-branch '
            '"$REPORT_BRANCH"') in runs
    assert workflow("plan.yml")["jobs"]["plan"]["env"]["MANIFESTS"] == "examples"
    assert '>> "$GITHUB_STEP_SUMMARY"' in runs
    (checkout,) = [s for s in steps(workflow("plan.yml"))
                   if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"]["fetch-depth"] == 0  # the base branch and its report's commit


def test_the_plan_step_plans_a_pull_request_against_its_real_base_branch(tmp_path):
    """The workflow's own shell step, run in a clone with a base branch and a one-image
    change on top: the comment names only that service and fits GitHub's limit."""
    import os
    import shutil
    import subprocess

    (plan,) = [s for s in steps(workflow("plan.yml")) if s.get("id") == "plan"]
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "MANIFESTS": workflow("plan.yml")["jobs"]["plan"]["env"]["MANIFESTS"]}
    clone = tmp_path / "clone"
    shutil.copytree(REPO_ROOT / "examples", clone / "examples")

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=clone, env=env, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    git("checkout", "-q", "-b", "pr")
    runtime = clone / "examples/runtimes/srt-qwen3-0-6b.yaml"
    runtime.write_text(runtime.read_text().replace("sglang:v0.5.5.post3-cu129-amd64",
                                                   "sglang:v0.5.6-cu129-amd64"))
    git("commit", "-q", "-a", "-m", "one image")
    outputs, summary = tmp_path / "outputs", tmp_path / "summary"
    env.update(plan["env"])  # the step's own (REPORT_BRANCH), with the base as a clone has it
    env.update(BASE="main", GITHUB_OUTPUT=str(outputs), GITHUB_STEP_SUMMARY=str(summary))
    done = subprocess.run(["bash", "-e", "-c", plan["run"]], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert outputs.read_text().strip() == "status=0", (clone / "plan.log").read_text()
    comment = (clone / "comment.md").read_text()
    assert comment.startswith("**Plan: 1 of 7 managed components to change (")
    assert ("qwen3-0-6b-engine-814f93c8</code> → <code>qwen3-0-6b-engine-fbcc4b2f</code>"
            in comment)
    assert "every Instance kept serving" in comment
    assert len(comment) + len(PLAN_MARKER) + 100 < 65536
    assert summary.read_text() == (clone / "plan.md").read_text()
    assert json.loads((clone / "plan.json").read_text())["summary"]["changing"] == 1


def test_plan_keeps_one_sticky_comment():
    (comment,) = [s for s in steps(workflow("plan.yml"))
                  if s.get("uses", "").startswith("actions/github-script@")]
    script = comment["with"]["script"]
    assert PLAN_MARKER in script
    # Looks for an earlier comment with the marker, updates it, else creates one.
    assert "github.paginate(github.rest.issues.listComments" in script
    assert "includes(marker)" in script
    update = script.index("github.rest.issues.updateComment")
    create = script.index("github.rest.issues.createComment")
    assert script.index("if (previous)") < update < script.index("} else {") < create
    # The plan is read from the file, never interpolated into the script.
    assert "readFileSync('comment.md'" in script
    assert "${{" not in script


# -- release.yml -----------------------------------------------------------------------


def test_a_release_builds_from_a_version_tag_the_image_the_pipelines_run():
    release = workflow("release.yml")
    assert release["on"] == {"push": {"tags": ["v*.*.*"]}}
    (job,) = release["jobs"].values()
    assert job["permissions"] == {"contents": "write", "packages": "write"}
    script = "\n".join(step.get("run", "") for step in job["steps"])
    # The tag must be pyproject's version, and the pipelines must name its image.
    assert 'tag="${GITHUB_REF_NAME#v}"' in script and '"$tag" != "$version"' in script
    assert 'grep -rqF "${IMAGE}:${version}" pipelines/' in script
    assert "python3 -m build" in script and "docker push" in script
    assert 'validate --repo /repo' in script, "the released image is run before it is pushed"
    version = re.search(r'^version = "(.+)"$', (REPO_ROOT / "pyproject.toml").read_text(),
                        re.MULTILINE).group(1)
    images = set(re.findall(r"image:\s*(\S+)", "\n".join(
        p.read_text() for p in (REPO_ROOT / "pipelines").rglob("*.yaml"))))
    assert images == {f"{job['env']['IMAGE']}:{version}"}
