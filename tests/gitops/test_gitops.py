"""The git side of ``reconcile``: clone, commit the report, push, rebase, credentials.

The "remote" is a bare repository in ``tmp_path`` reached by a ``file://``
URL (so that clones are really shallow); others pushing meanwhile are played
by a second clone. The cluster is ``sim:`` in ``tmp_path``.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from pathlib import Path

import git
import pytest

import omegitops.gitops.push as push_module
from omegitops.cli import build_parser
from omegitops.gitops import Author, checkout, commit_report, push_report, redact
from omegitops.gitops.commit import SUBJECT_LIMIT, commit_message, fit_subject
from omegitops.gitops.credentials import from_environment, git_environment, resolve, scrub
from omegitops.gitops.gitcmd import Git
from tests.conftest import EXAMPLES

SECRET = "s3cr3t"
SOMEONE = git.Actor("Someone Else", "someone@example.com")
# Always-settled inputs for the report files of API-level tests.
REPORT = {"generatedAt": "2026-01-01T00:00:00Z", "services": [], "summary": {"text": "none"}}


# -- helpers ------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_git_credentials(monkeypatch):
    """No credentials from the developer's environment leak into these tests."""
    for name in ("GIT_TOKEN", "GIT_USERNAME", "GIT_TOKEN_FILE", "GIT_CONFIG_COUNT"):
        monkeypatch.delenv(name, raising=False)


def make_remote(tmp_path: Path, files: dict[str, str | bytes], branch: str = "main") -> str:
    """A bare repository with one commit of ``files`` on ``branch``; its file:// URL."""
    bare = tmp_path / "remote.git"
    git.Repo.init(bare, bare=True, initial_branch=branch)
    url = bare.as_uri()
    push_files(tmp_path, url, files, "the manifests", branch=branch, first=True)
    return url


def push_files(tmp_path: Path, url: str, files: dict[str, str | bytes], message: str,
               branch: str = "main", first: bool = False) -> str:
    """Someone else commits ``files`` on ``branch`` of ``url`` and pushes; the new commit."""
    work = tmp_path / f"someone-{time.monotonic_ns()}"
    if first:
        repo = git.Repo.init(work, initial_branch=branch)
        repo.create_remote("origin", url)
    else:
        repo = git.Repo.clone_from(url, work)
        known = [ref.remote_head for ref in repo.remote().refs]
        # A new branch starts from the default one.
        repo.git.checkout("-B", branch, *([f"origin/{branch}"] if branch in known else []))
    for rel, content in files.items():
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    repo.git.add("--all")
    commit = repo.index.commit(message, author=SOMEONE, committer=SOMEONE)
    repo.git.push("origin", f"HEAD:refs/heads/{branch}")
    shutil.rmtree(work)
    return commit.hexsha


def example_files(prefix: str = "") -> dict[str, bytes]:
    return {f"{prefix}{p.relative_to(EXAMPLES).as_posix()}": p.read_bytes()
            for p in sorted(EXAMPLES.rglob("*")) if p.is_file()}


def remote_repo(url: str) -> git.Repo:
    return git.Repo(url.removeprefix("file://"))


def history(url: str, branch: str = "main") -> list[git.Commit]:
    return list(remote_repo(url).iter_commits(branch))


def changed_paths(commit: git.Commit) -> set[str]:
    return {d.b_path or d.a_path for d in commit.parents[0].diff(commit)}


def remote_file(url: str, path: str, branch: str = "main") -> bytes:
    # git cat-file rather than GitPython's blob streams, which die with their Repo object.
    bare = url.removeprefix("file://")
    return subprocess.run(["git", "--git-dir", bare, "cat-file", "blob", f"{branch}:{path}"],
                          capture_output=True, check=True).stdout


def run_reconcile(cli, tmp_path: Path, repo: str, *extra: str) -> tuple[int, str, str]:
    return cli("reconcile", "--repo", repo, "--cluster", f"sim:{tmp_path / 'cluster.json'}",
               *extra)


@pytest.fixture
def remote(tmp_path) -> str:
    return make_remote(tmp_path, {**example_files(), "README.md": "# manifests\n"})


# -- credentials and redaction --------------------------------------------------------


@pytest.mark.parametrize(("url", "shown"), [
    ("https://user:s3cr3t@example.com/x.git", "https://***@example.com/x.git"),
    ("https://s3cr3t@example.com/x.git", "https://***@example.com/x.git"),
    ("http://user:s3cr3t@127.0.0.1:9/x.git", "http://***@127.0.0.1:9/x.git"),
    ("file://user:s3cr3t@/srv/x.git", "file://***@/srv/x.git"),
    ("ssh://git:s3cr3t@example.com/x.git", "ssh://***@example.com/x.git"),
    ("ssh://git@example.com/x.git", "ssh://git@example.com/x.git"),
    ("git@example.com:org/x.git", "git@example.com:org/x.git"),
    ("https://example.com/x.git", "https://example.com/x.git"),
])
def test_redact_hides_credentials_in_urls(url, shown):
    assert redact(url) == shown


def test_scrub_hides_urls_and_known_secrets_in_free_text():
    text = "fatal: unable to access 'https://u:s3cr3t@h/x.git/': token s3cr3t refused"
    assert scrub(text, [SECRET]) == "fatal: unable to access 'https://***@h/x.git/': token *** refused"


def test_credentials_come_from_the_url_then_the_environment(tmp_path):
    assert resolve("https://u:s3cr3t@h/x.git", {"GIT_TOKEN": "other"})[1].password == SECRET
    clean, found = resolve("https://h/x.git", {"GIT_USERNAME": "bot", "GIT_TOKEN": SECRET})
    assert clean == "https://h/x.git" and (found.username, found.password) == ("bot", SECRET)
    mounted = tmp_path / "secret"
    mounted.mkdir()
    (mounted / "token").write_text(SECRET + "\n")
    (mounted / "username").write_text("robot\n")
    found = from_environment({"GIT_TOKEN_FILE": str(mounted / "token")})
    assert (found.username, found.password) == ("robot", SECRET)
    assert SECRET not in repr(found)
    assert resolve("https://h/x.git", {})[1] is None


def test_git_gets_credentials_from_the_helper_scoped_to_the_host(tmp_path):
    """`git credential fill` is what git runs before an https request."""
    clean, found = resolve("https://bot:s3cr3t@git.example.com/x.git", {})
    env = git_environment(clean, found, environ={})
    assert SECRET not in clean and all(SECRET not in k for k in env)
    asked = "protocol=https\nhost=git.example.com\n\n"
    out = subprocess.run(["git", "credential", "fill"], input=asked, capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
                         check=True).stdout
    assert "username=bot\n" in out and f"password={SECRET}\n" in out
    # Another host (a redirect, say) is not given them.
    other = subprocess.run(["git", "credential", "fill"], capture_output=True, text=True,
                           check=False,
                           input="protocol=https\nhost=elsewhere.example.com\n\n",
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env})
    assert SECRET not in other.stdout


def test_an_unreachable_remote_with_a_secret_fails_fast_and_never_shows_it(cli, tmp_path,
                                                                           caplog, monkeypatch):
    monkeypatch.setenv("GIT_TOKEN", "tok3n-from-env")
    started = time.monotonic()
    code, out, err = run_reconcile(cli, tmp_path, f"https://user:{SECRET}@127.0.0.1:9/x.git",
                                   "--branch", "main", "--commit", "--push")
    assert code == 1
    assert time.monotonic() - started < 30
    assert "https://***@127.0.0.1:9/x.git" in err
    for text in (out, err, caplog.text):
        assert SECRET not in text and "tok3n-from-env" not in text
    assert not (tmp_path / "cluster.json").exists(), "nothing ran without a repository"


def test_a_secret_in_the_url_reaches_no_output_report_commit_or_config(cli, tmp_path, remote,
                                                                       caplog):
    caplog.set_level(logging.DEBUG)  # GitPython logs every command line at debug level
    url = remote.replace("file://", f"file://user:{SECRET}@")
    code, out, err = cli("-v", "reconcile", "--repo", url, "--cluster",
                         f"sim:{tmp_path / 'cluster.json'}", "--commit", "--push")
    assert code == 0, err
    (head, *_) = history(remote)
    report = json.loads(remote_file(remote, "status/status.json"))
    assert report["repository"] == redact(url) == remote.replace("file://", "file://***@")
    for text in (out, err, caplog.text, head.message, remote_file(remote, "status/STATUS.md")
                 .decode(), json.dumps(report)):
        assert SECRET not in text


TOKEN = "S3KR1T/tok+4f2a=="  # a base64 token: "/", "+" and "=" in it


@pytest.mark.parametrize("url", [
    f"https://bob:{TOKEN}@127.0.0.1:9/r.git",          # "/" unencoded in the password
    f"https://{TOKEN}@127.0.0.1:9/r.git",              # the token as the user
    f"https://bob:{TOKEN}@127.0.0.1:9/r.git?ref=main#x",
    f"http://bob:{TOKEN}@[::1]:9/r.git",
    f"https://bob:{TOKEN}@127.0.0.1:9/org@team/r.git",  # and an "@" in the path
    "https://bob:S3KR1T%2Ftok@127.0.0.1:9/r.git",       # encoded: cloned, and fails
])
def test_no_url_shape_prints_its_secret(cli, tmp_path, url):
    """Every way a secret can sit in a URL: nothing of it reaches the output, whether
    the URL is refused (an unencoded "/" makes the host part ambiguous) or tried."""
    code, out, err = cli("-v", "reconcile", "--repo", url, "--cluster",
                         f"sim:{tmp_path / 'cluster.json'}", "--commit")
    assert code == 1, err
    for secret in ("S3KR1T", "tok+4f2a", "tok-4f2a"):
        assert secret not in out + err, err
    if "%2F" not in url:
        assert "must be percent-encoded ('%2F')" in err and "nothing was cloned" in err


# -- checkout -----------------------------------------------------------------------------


def test_a_url_is_cloned_shallow_one_branch_and_removed_after(tmp_path):
    url = make_remote(tmp_path, {"README.md": "main\n"})
    push_files(tmp_path, url, {"README.md": "main, again\n"}, "second")
    push_files(tmp_path, url, example_files("deploy/"), "manifests on a branch",
               branch="release")
    with checkout(url, "release", "deploy", workdir=tmp_path) as found:
        repo = found.git.repo
        assert repo.git.rev_parse("--is-shallow-repository") == "true"
        assert len(list(repo.iter_commits())) == 1
        assert [r.name for r in repo.remote().refs] == ["origin/release"]
        assert found.manifests == found.root / "deploy"
        assert (found.manifests / "ome-values.yaml").is_file()
        assert found.shown == url and found.branch == "release"
        clone = found.root
    assert not clone.exists() and not clone.parent.exists()


def test_a_missing_branch_or_path_is_an_error(cli, tmp_path, remote):
    code, _, err = run_reconcile(cli, tmp_path, remote, "--branch", "nope")
    assert code == 1 and "cannot clone" in err and "nope" in err
    code, _, err = run_reconcile(cli, tmp_path, remote, "--path", "nope")
    assert code == 1 and "--path nope" in err
    code, _, err = run_reconcile(cli, tmp_path, remote, "--path", "../etc")
    assert code == 2


def test_reconcile_from_a_url_with_branch_and_path(cli, tmp_path):
    url = make_remote(tmp_path, {"README.md": "nothing here\n"})
    push_files(tmp_path, url, example_files("deploy/"), "manifests", branch="release")
    code, out, err = run_reconcile(cli, tmp_path, url, "--branch", "release", "--path",
                                   "deploy", "--commit", "--push")
    assert code == 0, err
    assert "llama-chat-engine" in out
    report = json.loads(remote_file(url, "status/status.json", branch="release"))
    assert report["repository"] == url
    assert report["summary"]["services"] == 5
    # The report folder is relative to the repository root, not to --path.
    tree = remote_repo(url).commit("release").tree
    assert "status" in tree and "status" not in tree / "deploy"
    assert len(history(url, "main")) == 1, "the other branch is untouched"


# -- commit ---------------------------------------------------------------------------------


def test_commit_and_push_make_one_commit_touching_only_the_report(cli, tmp_path, remote):
    before = remote_repo(remote).commit("main")
    code, _, err = run_reconcile(cli, tmp_path, remote, "--until-idle", "--commit", "--push")
    assert code == 0, err
    head, parent = history(remote)[:2]
    assert parent == before and head.parents == (before,)
    assert changed_paths(head) == {"status/status.json", "status/STATUS.md"}
    assert (head.author.name, head.author.email) == ("omegitops", "omegitops@localhost")
    subject = head.message.splitlines()[0]
    assert subject == "omegitops: first status report (7 components)"
    # Everything outside status/ is as it was.
    assert {e.path for e in head.tree.traverse() if e.type == "blob"} - {
        "status/status.json", "status/STATUS.md"} == {
        e.path for e in before.tree.traverse() if e.type == "blob"}
    for entry in before.tree.traverse():
        if entry.type == "blob":
            assert (head.tree / entry.path).hexsha == entry.hexsha, entry.path


def test_a_second_run_with_nothing_new_makes_no_commit(cli, tmp_path, remote, caplog):
    caplog.set_level(logging.INFO)
    assert run_reconcile(cli, tmp_path, remote, "--until-idle", "--commit", "--push")[0] == 0
    first = history(remote)
    code, _, err = run_reconcile(cli, tmp_path, remote, "--until-idle", "--commit", "--push")
    assert code == 0, err
    assert "status report unchanged; nothing to commit" in caplog.text
    assert history(remote) == first


def test_the_message_says_what_moved(cli, tmp_path, remote):
    assert run_reconcile(cli, tmp_path, remote, "--commit", "--push")[0] == 0
    code, _, err = run_reconcile(cli, tmp_path, remote, "--until-idle", "--commit", "--push",
                                 "--author", "Ops Bot <ops@example.com>")
    assert code == 0, err
    head = history(remote)[0]
    subject, blank, *body = head.message.splitlines()
    assert subject.startswith("omegitops: 7 components moved (")
    assert len(subject) <= SUBJECT_LIMIT and blank == ""
    assert any(line.startswith("- llama-demo/llama-chat engine: 0/1 → 1/1 ready, Progressing → "
                               "Healthy") for line in body), body
    assert any(line.startswith("Now: 5 services, 7 components") for line in body)
    assert (head.author.name, head.author.email) == ("Ops Bot", "ops@example.com")
    assert (head.committer.name, head.committer.email) == ("Ops Bot", "ops@example.com")


def test_commit_message_fits_and_names_changes():
    old = {"services": [{"namespace": "ns", "name": f"svc-{i}", "events": [], "components": [
        {"component": "engine", "managed": True, "ready": 0, "desired": 2,
         "health": "Progressing", "revision": "svc-engine-aaaaaaaa",
         "currentRevision": "svc-engine-aaaaaaaa", "phaseSummary": "Creating ×2"}]}
        for i in range(4)]}
    new = json.loads(json.dumps(old))
    for service in new["services"]:
        service["components"][0].update(ready=2, health="Healthy", phaseSummary="Ready ×2")
    new["services"][0]["components"][0]["revision"] = "svc-engine-bbbbbbbb"
    new["validationErrors"] = [{"path": "x.yaml"}]
    message = commit_message(old, new)
    subject = message.splitlines()[0]
    assert len(subject) <= SUBJECT_LIMIT
    assert subject.startswith("omegitops: 4 components moved (svc-0 engine 0/2 → 2/2 ready")
    assert subject.endswith(", ...)")
    assert ("- ns/svc-0 engine: 0/2 → 2/2 ready, Progressing → Healthy, "
            "revision aaaaaaaa → bbbbbbbb, Creating ×2 → Ready ×2") in message
    assert "- validation errors 0 → 1" in message
    assert fit_subject("omegitops: " + "x" * 80, ["a"]) == ("omegitops: " + "x" * 80)[:72]


def test_a_component_gone_from_the_repository_but_still_running_is_orphaned_not_removed():
    """Without --prune a deleted service keeps serving: the commit says so."""
    component = {"component": "engine", "managed": True, "ready": 2, "desired": 2,
                 "health": "Healthy", "revision": "chat-engine-aaaaaaaa",
                 "currentRevision": "chat-engine-aaaaaaaa", "phaseSummary": "Ready ×2"}
    old = {"services": [{"namespace": "ns", "name": name, "events": [],
                         "components": [dict(component)]} for name in ("chat", "gone")],
           "unknownReplicas": []}
    new = {"services": [], "unknownReplicas": ["ns/chat-engine"]}
    message = commit_message(old, new)
    assert "- ns/chat engine: orphaned, still serving (no longer in the repository; " \
           "--prune tears it down)" in message
    assert "- ns/gone engine: removed" in message
    assert "chat engine orphaned" in message.splitlines()[0]


def test_commit_needs_a_git_tree_and_push_needs_commit(cli, tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(EXAMPLES, plain)
    code, _, err = run_reconcile(cli, tmp_path, str(plain), "--commit")
    assert code == 1 and "git work tree" in err
    assert run_reconcile(cli, tmp_path, str(plain), "--push")[0] == 2
    assert run_reconcile(cli, tmp_path, str(plain), "--branch", "main")[0] == 2
    assert run_reconcile(cli, tmp_path, str(plain), "--commit", "--author", "nobody")[0] == 2
    for outside in ("../up", "/abs", ".git/x", "."):
        assert run_reconcile(cli, tmp_path, str(plain), "--commit", "--report-dir",
                             outside)[0] == 2, outside
    assert not (tmp_path / "cluster.json").exists(), "usage errors stop before any pass"
    assert sorted(p.name for p in plain.iterdir()) == sorted(p.name for p in EXAMPLES.iterdir())


def test_a_plain_folder_is_read_in_place_as_before(cli, tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(EXAMPLES, plain)
    report = tmp_path / "report"
    code, _, err = run_reconcile(cli, tmp_path, str(plain), "--until-idle",
                                 "--report-dir", str(report))
    assert code == 0, err
    assert json.loads((report / "status.json").read_text())["repository"] == str(plain)
    assert not (plain / ".git").exists() and not (plain / "status").exists()


def test_in_place_commit_touches_nothing_outside_the_report_folder(cli, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(EXAMPLES, tree / "manifests")
    (tree / "README.md").write_text("readme\n")
    (tree / "NOTES.md").write_text("notes\n")
    repo = git.Repo.init(tree, initial_branch="main")
    repo.git.add("--all")
    repo.index.commit("start", author=SOMEONE, committer=SOMEONE)
    (tree / "README.md").write_text("edited, not staged\n")
    (tree / "NOTES.md").write_text("edited and staged\n")
    repo.git.add("NOTES.md")
    (tree / "scratch.txt").write_text("untracked\n")
    dirty = repo.git.status("--porcelain")

    code, _, err = run_reconcile(cli, tmp_path, str(tree), "--path", "manifests", "--commit",
                                 "--until-idle")
    assert code == 0, err
    assert changed_paths(repo.head.commit) == {"status/status.json", "status/STATUS.md"}
    assert repo.git.status("--porcelain") == dirty
    assert (tree / "README.md").read_text() == "edited, not staged\n"
    # A run that changed nothing commits nothing and leaves the report as committed.
    head = repo.head.commit
    assert run_reconcile(cli, tmp_path, str(tree), "--path", "manifests", "--commit",
                         "--until-idle")[0] == 0
    assert repo.head.commit == head and repo.git.status("--porcelain") == dirty


def test_in_place_branch_must_be_the_checked_out_one(cli, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(EXAMPLES, tree)
    repo = git.Repo.init(tree, initial_branch="main")
    repo.git.add("--all")
    repo.index.commit("start", author=SOMEONE, committer=SOMEONE)
    code, _, err = run_reconcile(cli, tmp_path, str(tree), "--branch", "release")
    assert code == 1 and "not release" in err
    assert run_reconcile(cli, tmp_path, str(tree), "--branch", "main")[0] == 0


# -- push: the remote moved -------------------------------------------------------------------


def someone_pushes_first(monkeypatch, tmp_path, url: str, files: dict[str, str | bytes],
                         times: int = 1) -> list[str]:
    """Before each of the first ``times`` pushes, someone else pushes ``files``; their commits."""
    pushed: list[str] = []
    real = push_module._push_once

    def push_once(git_, target):
        if len(pushed) < times:
            numbered = {k: f"{v} {len(pushed)}\n" if isinstance(v, str) else v
                        for k, v in files.items()}
            pushed.append(push_files(tmp_path, url, numbered, f"someone's change {len(pushed)}"))
        return real(git_, target)

    monkeypatch.setattr(push_module, "_push_once", push_once)
    monkeypatch.setattr(push_module, "BACKOFF_SECONDS", 0.0)
    return pushed


def assert_linear(url: str) -> None:
    assert all(len(c.parents) <= 1 for c in history(url)), "no merge commits"


def test_a_commit_pushed_meanwhile_is_kept_and_the_report_rebased_over_it(
        cli, tmp_path, remote, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    theirs = someone_pushes_first(monkeypatch, tmp_path, remote, {"README.md": "changed"})
    code, _, err = run_reconcile(cli, tmp_path, remote, "--until-idle", "--commit", "--push")
    assert code == 0, err
    assert "the remote moved" in caplog.text
    head, parent = history(remote)[:2]
    assert parent.hexsha == theirs[0] and head.parents == (parent,)
    assert changed_paths(head) == {"status/status.json", "status/STATUS.md"}
    assert remote_file(remote, "README.md") == b"changed 0\n"
    assert_linear(remote)


def test_a_concurrent_report_change_is_resolved_by_re_rendering(tmp_path, remote, monkeypatch):
    ours = {**REPORT, "summary": {"text": "ours"}}
    with checkout(remote, None, None, workdir=tmp_path, writable=True) as found:
        folder = found.root / "status"
        folder.mkdir()
        (folder / "status.json").write_text(json.dumps(ours, indent=2) + "\n")
        (folder / "STATUS.md").write_text("# ours\n")
        record = commit_report(found.git, Path("status"), Author("omegitops", "o@localhost"))
        their_report = {**REPORT, "summary": {"text": "theirs"}}
        theirs = push_files(tmp_path, remote, {
            "status/status.json": json.dumps(their_report),
            "status/STATUS.md": "# theirs\n", "status/NOTES.md": "kept\n"}, "their report")
        push_report(found, record, backoff=0)
    head, parent = history(remote)[:2]
    assert parent.hexsha == theirs and head.parents == (parent,)
    assert json.loads(remote_file(remote, "status/status.json")) == ours
    assert remote_file(remote, "status/STATUS.md") == b"# ours\n"
    assert remote_file(remote, "status/NOTES.md") == b"kept\n", "their other files stay"
    # Told against the report it lands on, not the one it was made on.
    assert head.message == commit_message(their_report, ours) != record.message
    assert_linear(remote)


def test_a_cleanly_merged_mixture_is_replaced_by_our_report(tmp_path, remote):
    """Their change merges cleanly into ours line by line; the result must still be ours."""
    lines = [f"line {i}\n" for i in range(40)]
    push_files(tmp_path, remote, {"status/STATUS.md": "".join(lines),
                                  "status/status.json": json.dumps(REPORT)}, "a report")
    with checkout(remote, None, None, workdir=tmp_path, writable=True) as found:
        ours = lines.copy()
        ours[0] = "ours at the top\n"
        (found.root / "status" / "STATUS.md").write_text("".join(ours))
        (found.root / "status" / "status.json").write_text(json.dumps({**REPORT, "x": 1}))
        record = commit_report(found.git, Path("status"), Author("omegitops", "o@localhost"))
        theirs = lines.copy()
        theirs[-1] = "theirs at the bottom\n"
        push_files(tmp_path, remote, {"status/STATUS.md": "".join(theirs)}, "their edit")
        push_report(found, record, backoff=0)
    assert remote_file(remote, "status/STATUS.md") == "".join(ours).encode()
    assert_linear(remote)


def test_push_gives_up_after_bounded_retries_and_loses_nothing(cli, tmp_path, remote,
                                                               monkeypatch):
    theirs = someone_pushes_first(monkeypatch, tmp_path, remote, {"README.md": "moving"},
                                  times=10)
    code, _, err = run_reconcile(cli, tmp_path, remote, "--commit", "--push")
    assert code == 1
    assert len(theirs) == 1 + push_module.RETRIES
    assert f"could not push the status report to {remote} (branch main)" in err
    assert "nothing is lost" in err
    # Everything they pushed is there, and our report is not (nothing forced).
    assert [c.hexsha for c in history(remote)[:len(theirs)]] == theirs[::-1]
    assert "status" not in remote_repo(remote).commit("main").tree


def test_a_push_refused_by_the_remote_is_not_retried(cli, tmp_path, remote, monkeypatch):
    hook = Path(remote.removeprefix("file://")) / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'protected branch' >&2\nexit 1\n")
    hook.chmod(0o755)
    attempts = []
    real = push_module._push_once
    monkeypatch.setattr(push_module, "_push_once",
                        lambda g, t: attempts.append(1) or real(g, t))
    code, _, err = run_reconcile(cli, tmp_path, remote, "--commit", "--push")
    assert code == 1 and len(attempts) == 1
    assert "remote rejected" in err and "nothing is lost" in err


def test_push_never_forces(tmp_path, remote, monkeypatch):
    """Every git command a push runs, listed: no --force, no +refspec."""
    commands: list[tuple[str, ...]] = []
    real = Git.attempt

    def attempt(self, *args, **kwargs):
        commands.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Git, "attempt", attempt)
    with checkout(remote, None, None, workdir=tmp_path, writable=True) as found:
        (found.root / "status").mkdir()
        for name in ("status.json", "STATUS.md"):
            (found.root / "status" / name).write_text(json.dumps(REPORT))
        record = commit_report(found.git, Path("status"), Author("omegitops", "o@localhost"))
        push_files(tmp_path, remote, {"README.md": "moved\n"}, "move")
        push_report(found, record, backoff=0)
    pushes = [c for c in commands if "push" in c]
    assert len(pushes) == 2
    for command in pushes:
        assert not any(a.startswith(("-f", "--force", "+")) or ":+" in a for a in command)
    assert_linear(remote)


def test_the_git_flags_parse():
    """The job's flags exist (tests/project/test_pipelines.py checks its full command line)."""
    args = build_parser().parse_args([
        "reconcile", "--repo", "https://h/x.git", "--branch", "main", "--path", "deploy",
        "--commit", "--push", "--author", "A <a@b>"])
    assert (args.branch, args.path, args.commit, args.push) == ("main", "deploy", True, True)
    assert args.author == "A <a@b>" and args.report_dir is None


def test_in_place_push_goes_to_the_tracking_branch(cli, tmp_path, remote):
    local = git.Repo.clone_from(remote, tmp_path / "local")
    code, _, err = run_reconcile(cli, tmp_path, str(tmp_path / "local"), "--commit", "--push")
    assert code == 0, err
    assert history(remote)[0].hexsha == local.head.commit.hexsha
    assert changed_paths(local.head.commit) == {"status/status.json", "status/STATUS.md"}
    local.git.checkout("--detach")
    (tmp_path / "local" / "README.md").write_text("not the report\n")
    code, _, err = run_reconcile(cli, tmp_path, str(tmp_path / "local"), "--until-idle",
                                 "--commit", "--push")
    assert code == 1 and "detached HEAD" in err and "nothing is lost" in err


# -- what reconcile trips on in the repository and the URL ------------------------------------


def test_percent_encoded_credentials_are_decoded():
    """A URL's user part is percent-encoded: the helper must hand git the real password."""
    clean, found = resolve("https://b%6Ft:p%40ss%2Fword@git.example.com/x.git", {})
    assert clean == "https://git.example.com/x.git"
    assert (found.username, found.password) == ("bot", "p@ss/word")
    assert redact("https://bot:p%40ss%2Fword@h/x.git") == "https://***@h/x.git"


def test_a_report_folder_replaced_by_a_file_is_refused_before_the_reconcile(cli, tmp_path):
    url = make_remote(tmp_path, {**example_files(), "status": "someone's notes\n"})
    code, _, err = run_reconcile(cli, tmp_path, url, "--commit", "--push")
    assert code == 1 and "Traceback" not in err
    assert ("omegitops: error: the report cannot be written: status is a file, not a folder "
            "in the repository; nothing was reconciled") in err
    assert "omegitops-" not in err, "the clone's temporary path is named"
    assert not (tmp_path / "cluster.json").exists(), "the reconcile ran"
    assert len(history(url)) == 1


def test_a_local_report_folder_that_is_a_file_is_refused_first(cli, tmp_path):
    (tmp_path / "report").write_text("not a folder\n")
    code, _, err = run_reconcile(cli, tmp_path, str(EXAMPLES), "--report-dir",
                                 str(tmp_path / "report"))
    assert code == 1
    assert f"{tmp_path / 'report'} is a file, not a folder; nothing was reconciled" in err
    assert not (tmp_path / "cluster.json").exists()


def test_after_a_rebase_the_message_is_told_against_the_new_parent(cli, tmp_path, remote,
                                                                  monkeypatch):
    """The clone had no report, so its message was "first status report"; another run's
    report landed first, and the commit on top of it changes that one."""
    theirs = {**REPORT, "summary": {"text": "theirs"}}
    someone_pushes_first(monkeypatch, tmp_path, remote, {
        "status/status.json": (json.dumps(theirs, indent=2) + "\n").encode(),
        "status/STATUS.md": b"# theirs\n"})
    code, _, err = run_reconcile(cli, tmp_path, remote, "--commit", "--push")
    assert code == 0, err
    head = history(remote)[0]
    ours = json.loads(remote_file(remote, "status/status.json"))
    assert head.message == commit_message(theirs, ours)
    assert head.message.startswith("omegitops: 7 components moved (")
    assert_linear(remote)


@pytest.mark.parametrize("link", ["status", "status/STATUS.md"])
def test_a_report_path_that_leads_out_of_the_clone_is_refused(cli, tmp_path, link):
    """A ``status`` link committed in the repository (or a report file that is one)
    would have the report, and its commit, written outside the clone: refused before
    anything is reconciled, and nothing is written there."""
    work = tmp_path / "work"
    shutil.copytree(EXAMPLES, work)
    outside = tmp_path / "outside"
    outside.mkdir()
    (work / link).parent.mkdir(parents=True, exist_ok=True)
    (work / link).symlink_to(outside / "STATUS.md" if link.endswith(".md") else outside)
    repo = git.Repo.init(work, initial_branch="main")
    repo.git.add("--all")
    repo.index.commit("manifests", author=SOMEONE, committer=SOMEONE)
    code, _, err = run_reconcile(cli, tmp_path, str(work), "--commit")
    assert code == 1, err
    assert "leads out of the repository through a symbolic link" in err
    assert "nothing was reconciled" in err
    assert not list(outside.iterdir())
    assert not (tmp_path / "cluster.json").exists()


def test_a_branch_deleted_on_the_remote_meanwhile_is_not_made_again(cli, tmp_path, remote,
                                                                   monkeypatch):
    """The branch the manifests were read from is deleted while the job runs: a push would
    create it again, with the report on manifests nobody keeps. It is refused, named."""
    real = push_module._push_once

    def push_once(git_, target):
        subprocess.run(["git", "-C", remote.removeprefix("file://"), "branch", "-D", "main"],
                       check=True, capture_output=True)
        return real(git_, target)

    subprocess.run(["git", "-C", remote.removeprefix("file://"), "branch", "keep", "main"],
                   check=True, capture_output=True)
    subprocess.run(["git", "-C", remote.removeprefix("file://"), "symbolic-ref", "HEAD",
                    "refs/heads/keep"], check=True, capture_output=True)
    monkeypatch.setattr(push_module, "_push_once", push_once)
    code, _, err = run_reconcile(cli, tmp_path, remote, "--branch", "main", "--commit",
                                 "--push")
    assert code == 1, err
    assert "branch main was deleted on the remote after it was read" in err
    assert "nothing is lost" in err
    assert "main" not in [h.name for h in remote_repo(remote).heads]
