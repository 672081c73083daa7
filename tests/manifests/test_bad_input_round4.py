"""Bad input, round four: nothing a repository holds deletes a running service,
crashes a run, or costs unbounded work; each file's error names its line and
field, and the other files are still read."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml

from omegitops.cli import main
from omegitops.cluster.sim import SimCluster
from omegitops.manifests.repository import read_repository
from omegitops.manifests.yamlfile import load_documents
from tests.conftest import EXAMPLES, write_repo

SERVICE = "services/llama-demo/llama-chat.yaml"


def examples_repo(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    return repo


def edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def pods(cluster):
    with SimCluster(cluster) as sim:
        return {p["metadata"]["name"] for p in sim.list_pods()}


# 1. A managed kind under another API group is an error, never "skipped".

@pytest.mark.parametrize("api_version", [
    "ome.oi/v1beta1", "OME.io/v1beta1", "Ome.Io/v1beta1", "serving.example.com/v1beta1",
    "v1beta1", "ome.io.example/v1beta1",
])
@pytest.mark.parametrize("kind", ["InferenceService", "ServingRuntime",
                                  "ClusterServingRuntime"])
def test_a_managed_kind_under_another_group_is_an_error(tmp_path, api_version, kind):
    write_repo(tmp_path, {"a.yaml": f"""
        # comment
        apiVersion: {api_version}
        kind: {kind}
        metadata:
          name: x
        """, "b.yaml": """
        apiVersion: ome.io/v1beta1
        kind: ClusterServingRuntime
        metadata:
          name: other
        """})
    repo = read_repository(tmp_path)
    assert not repo.skipped
    [error] = repo.errors
    assert (error.path, error.line, error.field) == ("a.yaml", 2, "apiVersion")
    assert f"{kind} with apiVersion {api_version!r} is not read" in error.message
    assert "'ome.io/v1beta1'" in error.message
    assert [m.id.name for m in repo.manifests] == ["other"]


def test_a_near_miss_group_is_named_as_a_typo(tmp_path):
    write_repo(tmp_path, {"a.yaml": """
        apiVersion: ome.oi/v1beta1
        kind: InferenceService
        metadata: {name: x}
        """})
    [error] = read_repository(tmp_path).errors
    assert "(is 'ome.oi' a typo of 'ome.io'?)" in error.message


def test_an_other_ome_kind_in_the_wrong_case_is_an_error_and_other_groups_are_skipped(
        tmp_path):
    write_repo(tmp_path, {"a.yaml": """
        apiVersion: OME.io/v1beta1
        kind: BaseModel
        metadata: {name: x}
        ---
        apiVersion: serving.kserve.io/v1beta1
        kind: Predictor
        metadata: {name: y}
        """})
    repo = read_repository(tmp_path)
    assert [e.line for e in repo.errors] == [1]
    assert [s.kind for s in repo.skipped] == ["Predictor"]


def test_validate_fails_on_a_mistyped_group(tmp_path, cli):
    repo = examples_repo(tmp_path)
    edit(repo / SERVICE, "apiVersion: ome.io/v1beta1", "apiVersion: ome.oi/v1beta1")
    code, out, _ = cli("validate", "--repo", str(repo))
    assert code == 1
    assert f"{SERVICE}:6: apiVersion: InferenceService with apiVersion 'ome.oi/v1beta1'" \
        in out
    assert "llama-chat " not in out.split("skipped")[-1]


@pytest.mark.parametrize("group", ["ome.oi", "OME.io"])
def test_a_mistyped_group_refuses_pruning_and_the_service_keeps_running(
        tmp_path, cli, group):
    repo = examples_repo(tmp_path)
    cluster = tmp_path / "c.json"
    args = ("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}", "--until-idle")
    code, _, err = cli(*args)
    assert code == 0, err
    running = {p for p in pods(cluster) if p.startswith("llama-chat-")}
    assert running
    edit(repo / SERVICE, "apiVersion: ome.io/v1beta1", f"apiVersion: {group}/v1beta1")
    code, _, err = cli(*args, "--prune")
    assert code == 1
    assert f"refusing to prune: {SERVICE} could not be read" in err
    assert running <= pods(cluster)
    # The rest are reconciled.
    assert "qwen3-0-6b-engine-0-default-0" in pods(cluster)


# 2. A 5,000-digit integer is an error at its line, not a crash.

BIG = "9" * 5000


@pytest.mark.parametrize("value", [BIG, f"-{BIG}", "0x" + "f" * 5000, "1_" * 2500 + "1"])
def test_a_huge_integer_in_a_manifest_is_an_error_at_its_line(tmp_path, value):
    write_repo(tmp_path, {"a.yaml": f"""
        apiVersion: ome.io/v1beta1
        kind: ClusterServingRuntime
        metadata:
          name: big
        spec:
          engineConfig:
            runner:
              args:
                - --port
                - {value}
        """, "b.yaml": """
        apiVersion: ome.io/v1beta1
        kind: ClusterServingRuntime
        metadata:
          name: other
        """})
    repo = read_repository(tmp_path)
    [error] = repo.errors
    assert (error.path, error.line) == ("a.yaml", 10)
    assert error.message.startswith("spec.engineConfig.runner.args[1]: an integer of ")
    assert "quote it if it is text" in error.message
    assert [m.id.name for m in repo.manifests] == ["other"]


def test_a_huge_integer_in_the_values_file_is_an_error_not_a_crash(tmp_path, cli):
    repo = examples_repo(tmp_path)
    edit(repo / "ome-values.yaml", "revisionHistoryLimit: 10", f"revisionHistoryLimit: {BIG}")
    code, _, err = cli("validate", "--repo", str(repo))
    assert code == 1
    assert "ome-values.yaml:39: ome.controller.lifecycle.revisionHistoryLimit: an integer" \
        in err


@pytest.mark.parametrize("value", [f'"{BIG}%"', f'"{"9" * 20}%"'])
def test_a_percentage_past_64_bits_is_an_error_and_the_rest_are_reconciled(
        tmp_path, cli, value):
    repo = examples_repo(tmp_path)
    path = "services/llama-demo/llama-pd.yaml"
    edit(repo / path, "maxUnavailable: 1", f"maxUnavailable: {value}")
    cluster = tmp_path / "c.json"
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                       "--until-idle")
    assert code == 1
    assert (f"{path}:30: InferenceService llama-demo/llama-pd: spec.engine.lifecycle."
            "updateStrategy.rollingUpdate.maxUnavailable: '99999") in err
    assert "is not a percentage: its number is larger than a 64-bit integer" in err
    assert "llama-chat-engine-0-default-0" in pods(cluster)
    assert not [p for p in pods(cluster) if p.startswith("llama-pd-")]


def test_a_manifest_with_a_huge_integer_is_reconciled_around(tmp_path, cli):
    repo = examples_repo(tmp_path)
    edit(repo / SERVICE, "minReadySeconds: 900", f"minReadySeconds: {BIG}")
    cluster = tmp_path / "c.json"
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                       "--until-idle")
    assert code == 1
    assert f"{SERVICE}:21: spec.engine.lifecycle.minReadySeconds: an integer of 5000" in err
    assert "qwen3-0-6b-engine-0-default-0" in pods(cluster)
    assert not [p for p in pods(cluster) if p.startswith("llama-chat-")]


# 3. A folder nested 1,500 levels deep is an error naming it, not a RecursionError.

def nest(root, levels):
    here = os.getcwd()
    os.chdir(root)
    try:
        for _ in range(levels):  # one level at a time: a path that long is never built
            os.mkdir("d")
            os.chdir("d")
        with open("x.yaml", "w") as out:
            out.write("a: 1\n")
    finally:
        os.chdir(here)


@pytest.fixture
def unnest():
    """Remove the nested folders at the end, a level at a time: pytest's own clean-up
    (``shutil.rmtree``) recurses once per level too."""
    roots = []
    yield roots.append
    for root in roots:
        while (root / "d").is_dir():
            for entry in (root / "d").iterdir():
                if entry.name == "d":
                    entry.rename(root / "d-next")
                else:
                    entry.unlink()
            (root / "d").rmdir()
            if (root / "d-next").exists():
                (root / "d-next").rename(root / "d")


def test_a_folder_nested_1500_levels_deep_is_an_error_and_the_rest_are_reconciled(
        tmp_path, cli, unnest):
    repo = examples_repo(tmp_path)
    unnest(repo)
    nest(repo, 1500)
    cluster = tmp_path / "c.json"
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                       "--until-idle", "--prune")
    assert code == 1
    deep = "/".join(["d"] * 100)
    assert (f"{deep}: folder nested 100 levels deep holds more folders; folders deeper "
            "than 100 levels are not read") in err
    assert f"refusing to prune: {deep} could not be read" in err
    assert "llama-chat-engine-0-default-0" in pods(cluster)


def test_a_folder_100_levels_deep_is_still_read(tmp_path):
    nest(tmp_path, 100)
    repo = read_repository(tmp_path)
    assert not repo.errors
    assert [s.path.count("/") for s in repo.skipped] == [100]


# 4. Aliases are bounded per file and per repository, not only per document.

def multiplied(name, kind="ConfigMap", api_version="v1"):
    """A document within the bounds per document: 40 alias references that add 123,440
    nodes (five levels of ten references to the one before)."""
    lines = [f"apiVersion: {api_version}", f"kind: {kind}", f"metadata: {{name: {name}}}",
             "spec:", "  l0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"  l{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]" for n in range(1, 5)]
    return "\n".join(lines) + "\n"


def scalar_aliases(name, count=100):
    """A document of ``count`` alias references to one scalar."""
    return (f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\n"
            "data:\n  a: &a x\n  b: [" + ", ".join(["*a"] * count) + "]\n")


def test_documents_within_their_bounds_break_the_bound_per_file(tmp_path):
    """200 such documents (78 KB) took validate 13.7 s; the file now stops at its
    fourth, where the aliases' nodes pass 400,000."""
    docs = [multiplied(f"c{i}", "ClusterServingRuntime", "ome.io/v1beta1") for i in range(200)]
    (tmp_path / "bomb.yaml").write_text("---\n".join(docs))
    write_repo(tmp_path, {"ok.yaml": """
        apiVersion: ome.io/v1beta1
        kind: ClusterServingRuntime
        metadata: {name: ok}
        """})
    repo = read_repository(tmp_path)
    [error] = repo.errors
    assert (error.path, error.line) == ("bomb.yaml", 1 + 3 * 10)
    assert error.message == (
        "the file's documents together hold aliases that expand to more than 400,000 "
        "nodes (the bound per file; each document is held to 100 alias references and "
        "200,000 expanded nodes)")
    assert [m.id.name for m in repo.manifests] == ["ok"]


def test_alias_references_are_bounded_per_file(tmp_path):
    (tmp_path / "a.yaml").write_text("---\n".join(scalar_aliases(f"c{i}") for i in range(11)))
    [error] = read_repository(tmp_path).errors
    assert error.line == 1 + 10 * 7
    assert error.message.startswith("the file's documents together hold more than 1,000 "
                                    "alias references (the bound per file;")


def test_aliases_are_bounded_per_repository_and_the_file_that_crosses_says_so(tmp_path):
    for i in range(6):  # three documents each: 370,320 nodes of aliases a file
        (tmp_path / f"f{i}.yaml").write_text(
            "---\n".join(multiplied(f"c{i}-{j}") for j in range(3)))
    repo = read_repository(tmp_path)
    [error] = repo.errors  # the 17th document passes 2,000,000
    assert (error.path, error.line) == ("f5.yaml", 1 + 1 * 10)
    assert error.message == (
        "the repository's files together hold aliases that expand to more than 2,000,000 "
        "nodes (the bound per repository), and this file crosses it")


def test_alias_references_are_bounded_per_repository(tmp_path):
    for i in range(51):
        (tmp_path / f"f{i:02}.yaml").write_text(
            "---\n".join(scalar_aliases(f"c{i}-{j}") for j in range(10)))
    [error] = read_repository(tmp_path).errors
    assert error.path == "f50.yaml"
    assert error.message.startswith("the repository's files together hold more than 50,000 "
                                    "alias references")


def test_the_bound_per_repository_counts_a_file_read_from_the_memo_too(tmp_path, cli):
    for i in range(6):
        (tmp_path / f"f{i}.yaml").write_text(
            "---\n".join(multiplied(f"c{i}-{j}") for j in range(3)))
    cache = tmp_path.parent / f"{tmp_path.name}-cache"
    for _ in range(2):
        code, out, _ = cli("validate", "--repo", str(tmp_path), "--cache-dir", str(cache))
        assert code == 1
        assert "f5.yaml:11: the repository's files together hold aliases" in out


def test_a_document_says_it_broke_the_bound_per_document(tmp_path):
    (tmp_path / "a.yaml").write_text(scalar_aliases("c", 101))
    [error] = read_repository(tmp_path).errors
    assert error.message == ("more than 100 alias references in one document (the bound "
                             "per document)")


# 10. Smaller ones.

MERGES = """
a: &a {x: 1, y: 1}
b: &b {x: 2, z: 2}
c:
  <<: [*a, *b]
  w: 0
d:
  x: 9
  <<: *a
e:
  <<: [*b, {z: 3, <<: *a}]
"""
AS_KUBECTL_READS_IT = {"x": 1, "y": 1, "z": 2, "w": 0}


def later_wins(self, node):
    """PyYAML 6.0.4's merge: of ``<<: [*a, *b]``, the later mapping wins."""
    merge, own = [], []
    for key, value in node.value:
        if key.tag != "tag:yaml.org,2002:merge":
            own.append((key, value))
            continue
        for source in value.value if isinstance(value, yaml.SequenceNode) else [value]:
            self.flatten_mapping(source)
            merge.extend(source.value)
    node.value = merge + own


@pytest.mark.parametrize("pyyaml", ["installed", "6.0.4"])
def test_merge_keys_resolve_as_kubectl_reads_them_whatever_pyyaml_does(monkeypatch, pyyaml):
    if pyyaml == "6.0.4":
        monkeypatch.setattr(yaml.constructor.SafeConstructor, "flatten_mapping", later_wins)
    [doc] = load_documents(MERGES)
    assert doc.data["c"] == AS_KUBECTL_READS_IT
    assert doc.data["d"] == {"x": 9, "y": 1}
    assert doc.data["e"] == {"x": 2, "y": 1, "z": 2}
    assert doc.line_of(("c", "x")) == 2  # where the value that won was written


@pytest.mark.parametrize("value", ["1:30", "1:30.5", "-1:00"])
def test_a_base_60_number_is_text_as_kubectl_reads_it(tmp_path, cli, value):
    """YAML 1.1 reads ``1:30`` as 90; go-yaml, as kubectl and the API server read
    manifests, as the string "1:30": so it is an error for an integer field."""
    [doc] = load_documents(f"a: {value}\nb: [{value}]\n{value}: c\n")
    assert doc.data == {"a": value, "b": [value], value: "c"}
    repo = examples_repo(tmp_path)
    edit(repo / SERVICE, "minReadySeconds: 900", f"minReadySeconds: {value}")
    code, out, _ = cli("validate", "--repo", str(repo))
    assert code == 1
    assert (f"{SERVICE}:21: InferenceService llama-demo/llama-chat: spec.engine.lifecycle."
            f"minReadySeconds: '{value}' is not of type 'integer'") in out


HISTORY = "ome.io/revision-history-limit"


@pytest.mark.parametrize("value", [" 3", "3 ", "٣", "３", "3_0", "0x3", "-1", "9" * 20, ""])
def test_the_revision_history_annotation_is_read_as_go_reads_it(tmp_path, cli, value):
    repo = examples_repo(tmp_path)
    edit(repo / SERVICE, "  namespace: llama-demo\n",
         f"  namespace: llama-demo\n  annotations:\n    {HISTORY}: {value!r}\n")
    code, out, _ = cli("validate", "--repo", str(repo))
    assert code == 1
    assert (f"{SERVICE}:12: InferenceService llama-demo/llama-chat: metadata.annotations."
            f"{HISTORY}: {value!r} is not a whole number of revisions (>= 0)") in out


@pytest.mark.parametrize("value, limit", [("3", 3), ("+3", 3), ("007", 7), ("0", 0)])
def test_the_revision_history_annotation_takes_what_atoi_takes(tmp_path, cli, value, limit):
    repo = examples_repo(tmp_path)
    edit(repo / SERVICE, "  namespace: llama-demo\n",
         f"  namespace: llama-demo\n  annotations:\n    {HISTORY}: {value!r}\n")
    code, out, err = cli("resolve", "--repo", str(repo), "-o", "json")
    assert code == 0, err
    [chat] = [c for c in json.loads(out) if c["inferenceService"] == "llama-demo/llama-chat"]
    assert chat["lifecycle"]["revisionHistoryLimit"] == {"value": limit, "source": "isvc"}


@pytest.mark.parametrize("command", [
    ("reconcile", "--cluster", "sim:{tmp}/c.json"), ("plan",), ("merge-reports", "{tmp}"),
])
@pytest.mark.parametrize("folder", ["", "  "])
def test_an_empty_report_dir_is_a_usage_error_and_nothing_runs(tmp_path, capsys, monkeypatch,
                                                               command, folder):
    args = [part.format(tmp=tmp_path) for part in command]
    monkeypatch.chdir(tmp_path)
    assert main([*args, "--repo", str(EXAMPLES), "--report-dir", folder]) == 2
    assert "argument --report-dir: an empty folder name" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()
    assert not list(tmp_path.iterdir())



@pytest.mark.parametrize("command", [
    ("reconcile", "--cluster", "sim:{tmp}/c.json", "--commit"), ("plan", "--base", "HEAD"),
    ("merge-reports", "{tmp}", "--commit"),
])
@pytest.mark.parametrize("branch", ["", "  "])
def test_an_empty_report_branch_is_a_usage_error_not_ignored(tmp_path, capsys, monkeypatch,
                                                             command, branch):
    # It was taken as no branch at all: plan read the report from the base instead, and
    # a reconcile would have committed onto the manifests' branch.
    args = [part.format(tmp=tmp_path) for part in command]
    monkeypatch.chdir(tmp_path)
    assert main([*args, "--repo", str(EXAMPLES), "--report-branch", branch]) == 2
    assert "argument --report-branch: an empty branch name" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())

def test_a_file_of_thousands_of_tiny_bad_documents_makes_a_bounded_report(tmp_path, cli):
    """100,000 of them (1 MB) made a 30 MB report for the job to commit: the report
    lists the first 1,000 errors (its Markdown the first 50) and counts the rest."""
    repo = examples_repo(tmp_path)
    (repo / "bad.yaml").write_text("---\n".join(f"[{i}]\n" for i in range(5000)))
    cluster, out = tmp_path / "c.json", tmp_path / "report"
    code, _, _ = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                     "--report-dir", str(out))
    assert code == 1
    report = json.loads((out / "status.json").read_text())
    assert len(report["validationErrors"]) == 1000
    assert report["validationErrors"][0] == {
        "path": "bad.yaml", "line": 1, "object": None, "field": None,
        "message": "a manifest must be a mapping, found a list"}
    assert report["validationErrors"][-1]["line"] == 1 + 999 * 2
    assert report["validationErrorsLeftOut"] == 4000
    assert report["summary"]["validationErrors"] == 5000
    assert "; 5000 validation errors" in report["summary"]["text"]
    assert (out / "status.json").stat().st_size < 400_000
    markdown = (out / "STATUS.md").read_text()
    assert markdown.count("a manifest must be a mapping") == 50
    assert "- … and 4950 more (`omegitops validate` lists them all)" in markdown
    # The rest are reconciled.
    assert report["summary"]["services"] == 5


def test_merged_shard_reports_stay_bounded(tmp_path):
    from omegitops.report.status import merge_reports

    def shard(lines, left_out):
        errors = [{"path": "a.yaml", "line": n, "object": None, "field": None,
                   "message": "bad"} for n in lines]
        return {"apiVersion": "omegitops.io/v1alpha1", "kind": "StatusReport",
                "generatedAt": "2025-01-01T00:00:00Z", "repository": ".", "revision": None,
                "summary": None, "services": [], "unknownReplicas": [],
                "validationErrors": errors, "validationErrorsLeftOut": left_out,
                "validationWarnings": []}

    merged = merge_reports([shard(range(1, 1001), 300), shard(range(501, 1501), 200)])
    assert [e["line"] for e in merged["validationErrors"]] == list(range(1, 1001))
    assert merged["validationErrorsLeftOut"] == 500 + 300
    assert merged["summary"]["validationErrors"] == 1800
    assert "validationWarningsLeftOut" not in merged
