"""The pull-request plan as a reviewer reads it: Markdown snapshots of ``plan --base``.

Each case makes a git repository with a base branch (what the job last ran) and a
change on top, then plans the change against the base, as the plan workflow does.
The snapshots live in ``tests/preview/snapshots/``; after an intended change to the plan,
``OMEGITOPS_UPDATE_SNAPSHOTS=1 python3 -m pytest tests/preview/test_plan_snapshots.py``
writes them again (review the diff before committing it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from omegitops.cli import main
from tests.fleet import strategy, write_service

HERE = Path(__file__).resolve().parent
SNAPSHOTS = HERE / "snapshots"
EXAMPLES = HERE.parents[1] / "examples"
GITHUB_COMMENT_LIMIT = 65536
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "GIT_AUTHOR_DATE": "2026-09-27T08:00:00Z", "GIT_COMMITTER_DATE": "2026-09-27T08:00:00Z"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV})
    return done.stdout


def base_and_change(repo: Path, change) -> None:
    """Commit what is in ``repo`` as ``main``, then ``change(repo)`` on a branch."""
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "change")
    change(repo)
    git(repo, "commit", "-q", "-a", "-m", "change")


def plan(repo: Path, capsys, *more: str) -> str:
    capsys.readouterr()
    code = main(["plan", "--repo", str(repo / "manifests"), "--base", "main", *more])
    out = capsys.readouterr().out
    assert code == 0, out
    # The base's commit is named; its hash depends on git's object format, not on us.
    return re.sub(r"commit [0-9a-f]{12}", "commit <base>", out)


def check_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / f"{name}.md"
    if os.environ.get("OMEGITOPS_UPDATE_SNAPSHOTS"):
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with OMEGITOPS_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(), (
        f"the plan differs from {path.name}; if intended, update it with "
        "OMEGITOPS_UPDATE_SNAPSHOTS=1 and review the diff")


def _replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


# -- the cases: each builds a repository whose branch ``change`` is planned against main


def one_runtime_image_change(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo / "manifests")
    runtime = repo / "manifests/runtimes/srt-qwen3-0-6b.yaml"
    image = "docker.io/lmsysorg/sglang:v0.5.5.post3-cu129-amd64"
    base_and_change(repo, lambda r: _replace_in(runtime, image,
                                                "docker.io/lmsysorg/sglang:v0.5.6-cu129-amd64"))
    return repo


def a_hundred_services(tmp_path: Path) -> Path:
    sys.path.insert(0, str(HERE.parent / "bench"))
    try:
        import genfleet
    finally:
        sys.path.remove(str(HERE.parent / "bench"))
    repo = tmp_path / "repo"
    genfleet.write_fleet(repo / "manifests", 100)
    runtime = repo / "manifests/runtimes/srt-gang-0.yaml"
    base_and_change(repo, lambda r: runtime.write_text(
        runtime.read_text().replace("image: sglang:v1", "image: sglang:v2")))
    return repo


def an_in_place_only_hold(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    life = strategy("InPlaceOnly", maxUnavailable=1)
    write_service(repo / "manifests", replicas=2, lifecycle=life)
    base_and_change(repo, lambda r: write_service(repo / "manifests", replicas=2,
                                                   lifecycle=life, env={"LOG_LEVEL": "debug"}))
    return repo


def every_example_image(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo / "manifests")

    def every_image(r: Path) -> None:
        for path in sorted((r / "manifests/runtimes").glob("*.yaml")):
            data = yaml.safe_load(path.read_text())
            text = yaml.safe_dump(data).replace("-cu129-amd64", "-cu130-amd64")
            path.write_text(text)

    base_and_change(repo, every_image)
    return repo


# name: (builder, plan's extra flags); tests/preview/test_gantt_rendered.py draws each one's gantt.
CASES = {
    "one-service-change": (one_runtime_image_change, ()),
    "hundred-services": (a_hundred_services, ("--max-chars", "65000")),
    "in-place-only-hold": (an_in_place_only_hold, ()),
    "every-example-image": (every_example_image, ()),
}


def test_one_runtime_image_change_names_only_that_service(tmp_path, capsys):
    out = plan(one_runtime_image_change(tmp_path), capsys)
    assert out.startswith("**Plan: 1 of 7 managed components to change (")
    assert "every Instance kept serving" in out
    assert out.count("<details><summary><b>") == 1 and "6 managed components are unchanged" in out
    assert "+      image: docker.io/lmsysorg/sglang:v0.5.6-cu129-amd64" in out
    check_snapshot("one-service-change", out)


def test_a_hundred_services_fit_one_comment_with_no_false_failures(tmp_path, capsys):
    out = plan(a_hundred_services(tmp_path), capsys, "--max-chars", "65000")
    assert len(out) <= 65000 < GITHUB_COMMENT_LIMIT
    head = out.split("\n\n### Changed components")[0]
    # Sized to the fleet: no failure that only the simulator would have.
    assert "failed" not in head and "did not settle" not in head, head
    assert out.startswith("**Plan: 20 of 175 managed components to change (")
    assert "155 managed components are unchanged" in out
    check_snapshot("hundred-services", out)


def test_a_hold_is_shown_with_its_gate(tmp_path, capsys):
    """InPlaceOnly refuses a change beyond images: the plan says so before it merges."""
    out = plan(an_in_place_only_hold(tmp_path), capsys)
    assert "InPlaceOnlyWillStall" in out
    assert "not reach the new revision" in out
    check_snapshot("in-place-only-hold", out)


def test_a_cut_plan_ends_with_whole_components_and_names_the_rest(tmp_path, capsys):
    repo = every_example_image(tmp_path)
    full = plan(repo, capsys)
    cut = plan(repo, capsys, "--max-chars", "9000")
    assert len(cut) <= 9000 < len(full)
    assert cut.count("<details>") == cut.count("</details>")
    assert cut.count("```") % 2 == 0
    assert re.search(r"\*\*\d+ more changed components? not shown here\*\*", cut), cut[-800:]
    # The summary and the forecast always come first.
    assert cut.split("### Changed")[0] == full.split("### Changed")[0]


@pytest.mark.parametrize("extra", [["--cluster", "kube"], ["--max-chars", "10"]])
def test_base_usage_errors(tmp_path, capsys, extra):
    repo = tmp_path / "repo"
    write_service(repo / "manifests", replicas=1)
    base_and_change(repo, lambda r: write_service(repo / "manifests", replicas=2))
    assert main(["plan", "--repo", str(repo / "manifests"), "--base", "main", *extra]) == 2


def test_a_base_that_is_not_a_commit_is_an_input_error(tmp_path, capsys):
    repo = tmp_path / "repo"
    write_service(repo / "manifests", replicas=1)
    base_and_change(repo, lambda r: write_service(repo / "manifests", replicas=2))
    assert main(["plan", "--repo", str(repo / "manifests"), "--base", "nope"]) == 1
    assert "--base nope: no such commit" in capsys.readouterr().err


def test_the_base_state_is_the_commit_the_committed_report_names(tmp_path, capsys):
    """The job last reconciled commit A and reported it; main has moved on to B since
    (not yet reconciled). A pull request on top of B is planned from A's state: the
    change B made is still to come, as the cluster will see it."""
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo / "manifests")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "A")
    reported = git(repo, "rev-parse", "HEAD").strip()
    (repo / "status").mkdir()
    (repo / "status/status.json").write_text(json.dumps({"revision": reported}))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the job's report of A")
    qwen = repo / "manifests/runtimes/srt-qwen3-0-6b.yaml"
    _replace_in(qwen, "sglang:v0.5.5.post3-cu129-amd64", "sglang:v0.5.6-cu129-amd64")
    git(repo, "commit", "-q", "-a", "-m", "B")
    git(repo, "checkout", "-q", "-b", "change")
    services = repo / "manifests/services"
    chat = next(p for p in sorted(services.rglob("*.yaml")) if "llama-chat" in p.read_text())
    _replace_in(chat, "minReadySeconds: 900", "minReadySeconds: 600")
    git(repo, "commit", "-q", "-a", "-m", "PR")
    out = plan(repo, capsys)
    assert "the state the job last reported (commit <base>, named by the status report" in out
    # Said where the plan starts: the report is older than main, and holds no Instances.
    assert "main is at commit <base> since: the changes between them are not reconciled" in \
        re.sub(r"at [0-9a-f]{12} since", "at commit <base> since", out)
    assert "The status report holds no Instance state" in out
    assert out.startswith("**Plan: 2 of 7 managed components to change (")
    assert "| minReadySeconds | 900 | 600 |" in out
