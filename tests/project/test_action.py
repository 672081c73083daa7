"""The plan as a reusable Action (``action.yml``) and the pre-commit hook
(``.pre-commit-hooks.yaml``), checked offline.

* action.yml is a composite action valid against the schema check-jsonschema vendors,
  installing omegitops at a pinned version (pyproject's by default);
* its plan step, run as written, plans a pull request against its base branch;
* its comment step keeps ONE comment per pull request, found by a hidden marker;
* docs/pull-requests.md's workflow is a valid workflow adding the Action in three lines;
* the hook's entry, run as pre-commit runs it, validates the examples.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
ACTION = REPO_ROOT / "action.yml"
HOOKS = REPO_ROOT / ".pre-commit-hooks.yaml"
PLAN_MARKER = "<!-- omegitops-plan -->"
PINNED = re.compile(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def action() -> dict:
    return yaml.safe_load(ACTION.read_text(encoding="utf-8"))


def action_steps() -> list[dict]:
    return action()["runs"]["steps"]


def package_version() -> str:
    return re.search(r'^version = "(.+)"$', (REPO_ROOT / "pyproject.toml").read_text(),
                     re.MULTILINE).group(1)


def vendored_schema(name: str) -> dict:
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads(vendor.joinpath(name).read_text(encoding="utf-8"))


def schema_errors(doc: dict, schema_name: str) -> list[str]:
    schema = vendored_schema(schema_name)
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in validator.iter_errors(doc)]


# -- action.yml --------------------------------------------------------------------------


def test_the_action_is_a_valid_composite_action():
    doc = action()
    assert doc["runs"]["using"] == "composite"
    assert not schema_errors(doc, "github-actions.json")
    broken = action()
    del broken["runs"]["steps"][1]["shell"]
    assert schema_errors(broken, "github-actions.json"), "the schema checks run steps"


def test_the_action_installs_a_pinned_release_by_default():
    inputs = action()["inputs"]
    assert inputs["version"]["default"] == package_version()
    assert inputs["package"]["default"] == ""
    (install,) = [s for s in action_steps() if s.get("name") == "Install omegitops"]
    assert install["env"] == {"VERSION": "${{ inputs.version }}",
                              "PACKAGE": "${{ inputs.package }}"}
    assert 'pip install -q "${PACKAGE:-omegitops[git]==${VERSION}}"' in install["run"]


def test_the_action_plans_the_whole_repository_by_default():
    inputs = action()["inputs"]
    assert inputs["manifests"]["default"] == "."
    (plan,) = [s for s in action_steps() if s.get("id") == "plan"]
    assert plan["env"]["MANIFESTS"] == "${{ inputs.manifests }}"
    assert "origin/{0}" in plan["env"]["BASE"] and "github.base_ref" in plan["env"]["BASE"]
    assert 'omegitops plan --repo "$MANIFESTS" --base "$BASE" "${report[@]}"' in plan["run"]
    assert 'report=(--report-branch "$REPORT_BRANCH")' in plan["run"]
    assert '>> "$GITHUB_STEP_SUMMARY"' in plan["run"]


def test_every_step_of_the_action_is_pinned_and_every_script_takes_inputs_by_env():
    for step in action_steps():
        if "uses" in step:
            assert PINNED.match(step["uses"]), step["uses"]
        else:
            assert step["shell"] == "bash"
            assert "${{" not in step["run"], step["run"][:200]
    text = ACTION.read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.strip().startswith("uses:"):
            assert re.search(r"#\s*v\d+(\.\d+)*\s*$", line), f"the version in a comment: {line}"


def test_the_action_keeps_one_sticky_comment():
    (comment,) = [s for s in action_steps()
                  if s.get("uses", "").startswith("actions/github-script@")]
    assert "inputs.comment == 'true'" in comment["if"]
    assert "head.repo.full_name == github.repository" in comment["if"], "forks: summary only"
    script = comment["with"]["script"]
    assert PLAN_MARKER in script
    # Looks for an earlier comment with the marker, updates it, else creates one.
    assert "github.paginate(github.rest.issues.listComments" in script
    assert "includes(marker)" in script
    update = script.index("github.rest.issues.updateComment")
    create = script.index("github.rest.issues.createComment")
    assert script.index("if (previous)") < update < script.index("} else {") < create
    # The plan is read from the file, never interpolated into the script.
    assert "path.join(process.env.OUT, 'comment.md')" in script
    assert "${{" not in script
    (plan,) = [s for s in action_steps() if s.get("id") == "plan"]
    assert comment["env"]["OUT"] == plan["env"]["OUT"]


def test_the_action_fails_when_the_plan_failed():
    last = action_steps()[-1]
    assert last["if"] == "steps.plan.outputs.status != '0'"
    assert "exit 1" in last["run"]
    assert action()["outputs"]["status"]["value"] == "${{ steps.plan.outputs.status }}"


def test_the_plan_step_plans_a_pull_request_against_its_real_base_branch(tmp_path):
    """The Action's own shell step, run in a clone with a base branch and a one-image
    change on top: the comment names only that service and fits GitHub's limit."""
    (plan,) = [s for s in action_steps() if s.get("id") == "plan"]
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    clone = tmp_path / "clone"
    shutil.copytree(REPO_ROOT / "examples", clone)

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=clone, env=env, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    git("checkout", "-q", "-b", "pr")
    runtime = clone / "runtimes/srt-qwen3-0-6b.yaml"
    runtime.write_text(runtime.read_text().replace("sglang:v0.5.5.post3-cu129-amd64",
                                                   "sglang:v0.5.6-cu129-amd64"))
    git("commit", "-q", "-a", "-m", "one image")
    out, outputs, summary = tmp_path / "out", tmp_path / "outputs", tmp_path / "summary"
    # The inputs' defaults: the whole repository, the job's report branch.
    inputs = action()["inputs"]
    env.update(MANIFESTS=inputs["manifests"]["default"], BASE="main",
               REPORT_BRANCH=inputs["report-branch"]["default"], OUT=str(out),
               GITHUB_OUTPUT=str(outputs), GITHUB_STEP_SUMMARY=str(summary))
    done = subprocess.run(["bash", "-e", "-c", plan["run"]], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert outputs.read_text().strip() == "status=0", (out / "plan.log").read_text()
    comment = (out / "comment.md").read_text()
    assert comment.startswith("**Plan: 1 of 7 managed components to change (")
    assert ("qwen3-0-6b-engine-814f93c8</code> → <code>qwen3-0-6b-engine-fbcc4b2f</code>"
            in comment)
    assert "every Instance kept serving" in comment
    assert len(comment) + len(PLAN_MARKER) + 100 < 65536
    assert summary.read_text() == (out / "plan.md").read_text()
    assert json.loads((out / "plan.json").read_text())["summary"]["changing"] == 1
    assert not {"plan.md", "comment.md", "plan.json"} & {p.name for p in clone.iterdir()}


# -- the documented workflow ----------------------------------------------------------------


def documented_workflow() -> dict:
    """The workflow docs/pull-requests.md tells a manifests repository to add."""
    text = (REPO_ROOT / "docs" / "pull-requests.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
              if "omegitops/omegitops@" in b and "jobs:" in b]
    assert len(blocks) == 1, "one workflow in docs/pull-requests.md uses the Action"
    doc = yaml.safe_load(blocks[0])
    doc["on"] = doc.pop(True)  # PyYAML reads the key `on` as YAML 1.1's True
    return doc


def test_the_docs_add_the_action_in_three_lines():
    doc = documented_workflow()
    assert not schema_errors(doc, "github-workflows.json")
    assert set(doc["on"]) == {"pull_request"}
    assert "paths" not in doc["on"]["pull_request"], "the whole repository by default"
    (job,) = doc["jobs"].values()
    assert doc["permissions"] == {"contents": "read", "pull-requests": "write"}
    checkout, step = job["steps"]
    assert checkout["with"] == {"fetch-depth": 0, "persist-credentials": False}
    assert step["uses"] == f"omegitops/omegitops@v{package_version()}"
    text = (REPO_ROOT / "docs" / "pull-requests.md").read_text(encoding="utf-8")
    assert f"pip install 'omegitops[git]=={package_version()}'" in text


# -- .pre-commit-hooks.yaml -------------------------------------------------------------------


def test_the_hook_validates_the_whole_repository_once():
    (hook,) = yaml.safe_load(HOOKS.read_text(encoding="utf-8"))
    assert hook["id"] == "omegitops-validate"
    assert hook["language"] == "python"
    assert hook["entry"] == "omegitops validate"
    # validate reads a repository folder, not files: no file names are passed.
    assert hook["pass_filenames"] is False
    assert re.search(hook["files"], "services/chat.yaml")
    assert re.search(hook["files"], "ome-values.yml")
    assert not re.search(hook["files"], "README.md")


def run_hook(repository: Path) -> subprocess.CompletedProcess:
    """The hook's entry and args, run in the repository as pre-commit runs it; the
    ``omegitops`` on PATH, else this interpreter's."""
    (hook,) = yaml.safe_load(HOOKS.read_text(encoding="utf-8"))
    argv = shlex.split(hook["entry"]) + hook.get("args", [])
    executable = shutil.which(argv[0])
    argv = ([executable] if executable else [sys.executable, "-m", "omegitops"]) + argv[1:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run(argv, cwd=repository, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_hook_passes_the_examples(tmp_path):
    done = run_hook(REPO_ROOT / "examples")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 errors" in done.stdout


def test_the_hook_fails_a_broken_manifest(tmp_path):
    repository = tmp_path / "manifests"
    shutil.copytree(REPO_ROOT / "examples", repository)
    broken = next(repository.rglob("*.yaml"))
    broken.write_text(broken.read_text() + "\n---\n: [unclosed\n")
    done = run_hook(repository)
    assert done.returncode == 1, done.stdout + done.stderr
