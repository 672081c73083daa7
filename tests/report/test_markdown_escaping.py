"""Values from manifests are inert text in the plan comment and STATUS.md
(omegitops/report/markdown.py): no mention, no issue link, no HTML of their own, folds
that stay balanced, code spans that hold any backticks, and the text still readable.

Each document is parsed as GitHub reads it (CommonMark with tables and strikethrough,
markdown-it-py) and its tokens are checked."""

from __future__ import annotations

import html
import json
import re

import pytest
from markdown_it import MarkdownIt

from omegitops.preview.planview import render_markdown as render_plan
from omegitops.report import markdown
from omegitops.report.status import render_markdown as render_status
from tests.conftest import RUNTIME, SERVICE, write_repo

pytestmark = pytest.mark.filterwarnings("ignore")

PAYLOADS = ["@octocat", "#1", "<script>alert(1)</script>", "<img src=x onerror=alert(1)>",
            "</details>", "```", "a `` b", "x | y", "*bold* _it_ [l](http://e.x)"]
EVIL = " ".join(PAYLOADS)
# A file path can carry all of them: a folder ending in "<" and one starting "details>"
# make "</details>" when joined.
EVIL_DIRS = ["@octocat #1 <img src=x onerror=alert(1)> `` ``` x | y <script>alert(1)<",
             "script> *bold* _it_ [l](http:", "", "e.x) <", "details>"]
EVIL_PATH = "/".join(d for d in EVIL_DIRS if d)
ZW = dict.fromkeys(map(ord, "\u200b\u200d"))
LIVE = re.compile(r"(?<![\w`])(@[A-Za-z0-9]|#\d)")
OUR_TAGS = {"details", "summary", "b", "code", "a"}


def _tokens(document: str):
    parser = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    for token in parser.parse(document):
        yield token
        yield from token.children or ()


def check_inert(document: str, payloads: list[str] = PAYLOADS) -> None:
    """The checks every document passes, whatever its values carried."""
    depth = 0
    readable = []
    for token in _tokens(document):
        if token.type in ("html_block", "html_inline"):
            content = token.content
            for closing, tag in re.findall(r"<(/?)([A-Za-z][\w-]*)", content):
                assert tag.lower() in OUR_TAGS, (tag, content)
                if tag.lower() == "details":
                    depth += -1 if closing else 1
                    assert depth >= 0, content
            outside_code = re.sub(r"<code>.*?</code>", "", content)
            assert not LIVE.search(html.unescape(outside_code)), content
            readable.append(html.unescape(re.sub(r"<[^>]*>", "", content)))
        elif token.type == "text":
            assert not LIVE.search(token.content), token.content
            readable.append(token.content)
        elif token.type in ("code_inline", "fence", "code_block"):
            readable.append(token.content)
        elif token.type == "inline":
            readable.append("".join(c.content for c in token.children or ()))
    assert depth == 0
    shown = "\n".join(readable).translate(ZW)
    for payload in payloads:
        assert payload in shown, payload


def test_the_filters_each_make_a_value_inert():
    for render in (markdown.text, markdown.code):  # in Markdown
        check_inert(f"<details><summary>x</summary>\n\n- {render(EVIL)}\n\n</details>\n")
    for render in (markdown.html, markdown.html_code):  # in an HTML line
        check_inert(f"<details><summary><b>{render(EVIL)}</b></summary>\n\n</details>\n")
    check_inert(f"| a | b |\n|---|---|\n| {markdown.text(EVIL)} | {markdown.code_cell(EVIL)} |\n")
    assert markdown.code("``a```") == "```` ``a``` ````"
    assert markdown.code("plain") == "`plain`"
    assert markdown.text("1. first") == "1\\. first"
    assert markdown.anchor("demo/x</details>") == "demoxdetails"


# -- the documents, from a repository whose values carry the payloads --------------------

def _repository(tmp_path):
    broken = SERVICE.replace("name: small\n", "name: broken\n").replace(
        "minReplicas: 2", f"minReplicas: {json.dumps(EVIL)}")
    return write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME,
                                          f"{EVIL_PATH}.yaml": SERVICE,
                                          "broken.yaml": broken})


def test_the_status_report_and_the_plan_quote_manifests_inertly(cli, tmp_path):
    repo = _repository(tmp_path)
    cluster, report_dir = tmp_path / "c.json", tmp_path / "report"
    code, _, err = cli("reconcile", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                       "--until-idle", "--report-dir", str(report_dir))
    assert code == 1, err  # the broken service's validation error
    status = (report_dir / "STATUS.md").read_text(encoding="utf-8")
    assert EVIL_PATH in status or markdown.code(EVIL_PATH) in status
    check_inert(status, [EVIL_PATH])

    runtime = repo / "runtime.yaml"
    runtime.write_text(runtime.read_text().replace(
        "      resources:",
        "      env:\n        - name: NOTE\n          value: " + json.dumps(EVIL)
        + "\n      resources:"))
    code, plan, err = cli("plan", "--repo", str(repo), "--cluster", f"sim:{cluster}")
    assert "Changed template fields" in plan, plan
    assert "validation error" in plan
    check_inert(plan)

    # Every other value a document quotes, as the cluster or a manifest could give it.
    code, out, _ = cli("plan", "--repo", str(repo), "--cluster", f"sim:{cluster}",
                       "-o", "json")
    document = json.loads(out)
    _poison_plan(document)
    check_inert(render_plan(document))
    report = json.loads((report_dir / "status.json").read_text(encoding="utf-8"))
    _poison_report(report)
    check_inert(render_status(report))


def _poison_plan(document: dict) -> None:
    document["planningErrors"] = [EVIL]
    document["removed"] = [{"service": "demo/" + EVIL, "component": "engine", "instances": 1,
                            "serving": 1, "withoutPrune": EVIL, "withPrune": EVIL}]
    document["validation"]["warnings"].append(
        {"path": EVIL_PATH, "line": 3, "object": EVIL, "field": EVIL, "message": EVIL})
    for c in document["components"]:
        c["warnings"] = [{"code": "X", "message": EVIL}]
        c["hold"] = {"gate": "Budget", "reason": EVIL, "target": EVIL}
        c["conditions"] = [{"type": "RolloutStalled", "status": "True", "reason": EVIL,
                            "message": EVIL}]
        c["lifecycleChanges"] = [{"field": "minReadySeconds", "old": EVIL, "new": EVIL}]
        c["revision"]["changed"] = [EVIL, "a ``` b `", "`x"]
        c["nextStep"] = [EVIL]
        c["templateDiff"] = "```\n" + EVIL + "\n   ```\n"


def _poison_report(report: dict) -> None:
    report["validationWarnings"] = [
        {"path": EVIL_PATH, "line": 3, "object": EVIL, "field": EVIL, "message": EVIL}]
    report["unknownReplicas"] = [EVIL]
    for service in report["services"]:
        service["path"] = EVIL_PATH
        service["runtime"] = EVIL
        service["events"] = [{"lastTimestamp": "t", "reason": EVIL, "count": 1,
                              "message": EVIL}]
        for c in service["components"]:
            c["healthReason"] = EVIL
            c["rolloutHold"] = {"gate": "Budget", "reason": EVIL, "target": EVIL,
                                "since": "t"}
            c["conditions"] = [{"type": "Ready", "status": "False", "reason": EVIL,
                                "lastTransitionTime": "t",
                                "message": EVIL}]


def _text_every_step(value) -> str:
    """``markdown.text`` with no shortcut: every step taken on every value."""
    escaped = re.sub(r"[\r\n]+", " ", str(value))
    escaped = escaped.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    escaped = re.sub(r"([\\`*_\[\]|~])", r"\\\1", escaped)
    escaped = re.sub(r"^(\s*)(?:([-+=])|(\d+)\.)",
                     lambda m: f"{m.group(1)}\\{m.group(2)}" if m.group(2)
                     else f"{m.group(1)}{m.group(3)}\\.", escaped, count=1)
    return re.sub(r"([@#])", "\\1\u200d", escaped)


def test_text_gives_plain_values_back_as_every_step_would():
    """``text`` returns a value holding nothing to escape as it is (most of what a
    report quotes), and ``code`` looks for runs of backticks only in a value that has
    one: the same answers as taking every step, on any value."""
    import random

    chance = random.Random(7)
    alphabet = "ab9-_ .\t\n\r+=1.@#&<>`*[]|~\\é\u00a0"
    values = ["svc-00001", "engine", "Healthy", "12.5", "1. first", " - x", "=", "a_b",
              "sglang:v1", "", 42, None, 3.5, True] + [
        "".join(chance.choice(alphabet) for _ in range(chance.randint(0, 8)))
        for _ in range(5000)]
    for value in values:
        assert markdown.text(value) == _text_every_step(value), repr(value)
        content = re.sub(r"[\r\n]+", " ", str(value))
        fence = "`" * (max(map(len, re.findall(r"`+", content)), default=0) + 1)
        pad = " " if content[:1] in ("`", " ") or content[-1:] in ("`", " ") else ""
        assert markdown.code(value) == f"{fence}{pad}{content}{pad}{fence}", repr(value)
