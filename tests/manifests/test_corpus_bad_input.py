"""The bad-input corpus: every broken file gets a clear error and harms nothing else.

Each folder of ``tests/manifests/corpus/`` is a tiny repository holding only its broken
file(s); at test time it is laid over ``tests/manifests/corpus/_base`` (one runtime and
one good OMENative service, demo/good). Its ``expect.yaml`` says:

- ``exit``: the exit code of ``validate`` and ``reconcile`` (0 for inputs that
  are fine, such as an empty file);
- ``errors``: each expected error as file, line (null where no line is
  meaningful, as for a binary file) and a substring of its message;
- ``operator``: an invalid operator setting, which must stop the run before
  anything is written, so the simulated cluster is never even created;
- ``generate``: a file made at test time (huge, binary, UTF-16, a link, ...), so that
  the repository holds no megabytes and no bytes that editors or git mangle;
- ``output``: more text ``validate`` must print; ``reconciled``: replicas that
  must exist after ``reconcile`` besides the good service's.

Every case checks that the repository is byte-identical afterwards, that the
good service still reconciled (except the operator cases), and that nothing
was written outside the places named on the command line.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from omegitops.manifests.yamlfile import MAX_FILE_BYTES

CORPUS = Path(__file__).resolve().parent / "corpus"
BASE = CORPUS / "_base"
CASES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and not p.name.startswith("_"))
CASE_FILES = {"README.md", "expect.yaml"}
GOOD_REPLICA = "demo/good-engine"
MAX_MESSAGE = 500


def expectation(case: str) -> dict:
    return yaml.safe_load((CORPUS / case / "expect.yaml").read_text(encoding="utf-8"))


def _service(name: str) -> str:
    """The base's good service, renamed: the text the generated files are made from."""
    text = (BASE / "services" / "good.yaml").read_text(encoding="utf-8")
    return text.replace("name: good\n", f"name: {name}\n")


def generated(kind: str) -> bytes:
    """The bytes of a file too big, too binary or too fragile to commit."""
    if kind == "huge":
        line = b"# padding to push the file over the size limit\n"
        return _service("huge").encode() + line * (MAX_FILE_BYTES // len(line) + 1)
    if kind == "binary":
        return b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 16
    if kind == "utf-16":
        return _service("wide").encode("utf-16")
    if kind == "invalid-utf8":
        return _service("latin").replace("small-model", "mod\xe8le").encode("latin-1") + b"\xff"
    if kind == "long-name":
        return _service("a" * 100_000).encode()
    if kind == "bom":
        return _service("bom").encode("utf-8-sig")
    if kind == "crlf":
        return _service("crlf").replace("\n", "\r\n").encode()
    if kind == "crlf-error":
        text = _service("crlf") + "    lifecycle:\n      minReadySeconds: -5\n"
        return text.replace("\n", "\r\n").encode()
    raise AssertionError(f"unknown generated kind {kind!r}")


def build(case: str, root: Path) -> Path:
    """The case's repository: the base, the case's files over it, generated files last."""
    shutil.copytree(BASE, root, ignore=shutil.ignore_patterns("README.md"))
    shutil.copytree(CORPUS / case, root, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(*CASE_FILES))
    spec = expectation(case).get("generate")
    if spec:
        path = root / spec["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        make_special(spec["kind"], path, root)
    return root


def make_special(kind: str, path: Path, root: Path) -> None:
    """A generated file: links, folders, or bytes from ``generated``."""
    if kind == "symlink-outside":
        # A good service, but outside: had it been read, demo/outside would reconcile.
        target = root.parent / "outside.yaml"
        target.write_text(_service("outside"), encoding="utf-8")
        path.symlink_to(target)
    elif kind == "symlink-zero":
        path.symlink_to("/dev/zero")  # never ends: read whole, it fills the memory
    elif kind == "symlink-broken":
        path.symlink_to("gone.yaml")
    elif kind == "symlink-loop":
        path.symlink_to(path.name)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(generated(kind))


def snapshot(root: Path) -> dict[str, str]:
    """Every file and folder under ``root`` with the hash of its bytes."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def located(text: str, error: dict) -> bool:
    """Whether one line of ``text`` names the error's file, line and message."""
    where = f"{error['file']}:{error['line']}: " if error["line"] else f"{error['file']}: "
    return any(where in line and error["message"] in line for line in text.splitlines())


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """(repository, cluster folder, report folder) of a case, run from an empty folder."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    sim = tmp_path / "sim"
    sim.mkdir()
    return tmp_path / "repo", sim, tmp_path / "report"


def test_the_corpus_is_complete():
    assert len(CASES) >= 50
    for case in CASES:
        readme = (CORPUS / case / "README.md").read_text(encoding="utf-8").strip()
        assert readme and "\n" not in readme, case
        expect = expectation(case)
        assert expect["exit"] in (0, 1), case
        assert bool(expect.get("errors")) == (expect["exit"] == 1), case
        committed = [p for p in (CORPUS / case).rglob("*")
                     if p.is_file() and p.name not in CASE_FILES]
        assert committed or expect.get("generate"), case
        assert all(p.stat().st_size < 64 * 1024 for p in committed), case


@pytest.mark.parametrize("case", CASES)
def test_bad_input(case, cli, workspace):
    repo, sim, report = workspace
    expect = expectation(case)
    build(case, repo)
    before = snapshot(repo)

    code, out, err = cli("validate", "--repo", str(repo))
    text = out + err
    assert code == expect["exit"], text
    for error in expect.get("errors", []):
        assert located(text, error), f"{error} not in:\n{text}"
    if expect["exit"] == 0:
        assert "invalid:" not in out and "error" not in err, text
    for wanted in expect.get("output", []):
        assert wanted in out, text
    if not expect.get("operator"):
        # The good service is listed as valid, whatever else is broken.
        assert "InferenceService demo/good " in out.split("invalid:")[0], text

    cluster = sim / "c.json"
    code, out, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                         "--report-dir", str(report))
    assert code == expect["exit"], out + err
    for error in expect.get("errors", []):
        assert located(err, error), f"{error} not in:\n{err}"
    if expect.get("operator"):
        # Stopped before anything was written: no cluster, no lock, no report.
        assert list(sim.iterdir()) == [] and not report.exists(), out + err
    else:
        replicas = json.loads(cluster.read_text())["objects"].get("InferenceReplica", {})
        assert set(replicas) == {GOOD_REPLICA, *expect.get("reconciled", [])}
        assert sorted(p.name for p in report.iterdir()) == ["STATUS.md", "status.json"]

    assert snapshot(repo) == before, "the repository was written to"
    assert list(Path.cwd().iterdir()) == [], "something was written to the working folder"


@pytest.mark.parametrize("case", CASES)
def test_messages_are_short_and_located(case, cli, workspace):
    """No error echoes a whole document or a hostile value, and none is a traceback."""
    repo, _, _ = workspace
    expect = expectation(case)
    build(case, repo)
    code, out, err = cli("validate", "--repo", str(repo), "-o", "json")
    assert code == expect["exit"]
    assert "Traceback" not in out + err
    if expect.get("operator"):
        # An operator setting stops everything: one line on stderr, no JSON.
        assert out == "" and err.startswith("omegitops: error: ")
        messages = err.splitlines()
        assert len(messages) == 1
    else:
        report = json.loads(out)
        messages = [": ".join(str(e[k]) for k in ("path", "line", "object", "field", "message")
                              if e[k]) for e in report["errors"]]
        assert {e["path"] for e in report["errors"]} <= {e["file"] for e in
                                                          expect.get("errors", [])}
    for message in messages:
        assert len(message) <= MAX_MESSAGE, message[:200]


def test_a_file_name_that_is_not_utf8_is_named_as_git_names_it(tmp_path, cli):
    """A file whose name is not UTF-8 used to crash the report writer after the passes
    (``surrogates not allowed``) and, on sim:, throw the passes away. It is named as git
    quotes it, the run reconciles and writes its report, and what it applied is kept."""
    import json
    import os

    repo = tmp_path / "repo"
    shutil.copytree(BASE, repo)
    text = (BASE / "services" / "good.yaml").read_bytes()
    bad = text.replace(b"name: good\n", b"name: other\n").replace(
        b"minReplicas:", b"minReadySeconds: -1\n    minReplicas:", 1)
    with open(os.fsencode(repo / "services") + b"/caf\xe9.yaml", "wb") as out:
        out.write(bad)
    state, report = tmp_path / "c.json", tmp_path / "report"
    code, out, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{state}",
                         "--until-idle", "--report-dir", str(report))
    assert code == 1, err
    assert "Traceback" not in err
    assert '"services/caf\\351.yaml"' in err, err
    written = json.loads((report / "status.json").read_text(encoding="utf-8"))
    assert '"services/caf\\351.yaml"' in {e.get("path") for e in written["validationErrors"]}
    saved = json.loads(state.read_text())["objects"].get("InferenceReplica", {})
    assert saved, "the passes' writes were kept"
