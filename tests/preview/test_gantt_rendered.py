"""The plan's gantt charts drawn by the real Mermaid, each bar measured against the plan.

Every case of the plan snapshots (``tests/preview/test_plan_snapshots.py``) is planned with
``--json-out``; its chart is rendered to SVG by ``@mermaid-js/mermaid-cli`` on Debian's
chromium (``tests/preview/mermaid/install.sh`` installs both when missing), and each bar's
left edge and width must be its start and length in the plan's JSON, on one linear
axis. With ``dateFormat X`` (seconds) Mermaid drew later batches from zero: 4 of 11 bars
of a 4-batch image bump (``op3`` written 332-662 s, drawn from 0).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from omegitops.cli import main
from tests.preview.test_plan_snapshots import CASES

HERE = Path(__file__).resolve().parent
# Chromium as the machine allows it here: no sandbox (root), nothing fetched.
PUPPETEER = {"executablePath": "/usr/bin/chromium",
             "args": ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                      "--disable-background-networking", "--disable-component-update",
                      "--disable-sync"]}
# Pixels a bar may be off the axis: Mermaid rounds each edge to a whole pixel.
SLACK = 1.5


@pytest.fixture(scope="module")
def mmdc(tmp_path_factory) -> list[str]:
    done = subprocess.run(["bash", str(HERE / "mermaid" / "install.sh")], capture_output=True,
                          text=True, check=False)
    if done.returncode == 3:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-3000:]
    config = tmp_path_factory.mktemp("mermaid") / "puppeteer.json"
    config.write_text(json.dumps(PUPPETEER))
    return [done.stdout.strip().splitlines()[-1], "--puppeteerConfigFile", str(config)]


def rendered_bars(mmdc: list[str], chart: str, folder: Path) -> dict[str, tuple[float, float]]:
    """Each task bar's (x, width) in the SVG Mermaid draws, by its ``op<N>`` id."""
    source, svg = folder / "chart.mmd", folder / "chart.svg"
    source.write_text(chart)
    done = subprocess.run([*mmdc, "--quiet", "-i", str(source), "-o", str(svg)],
                          capture_output=True, text=True, check=False, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    bars = {}
    for rect in re.findall(r"<rect [^>]*>", svg.read_text()):
        found = re.search(r'id="[^"]*-(op\d+)"', rect)
        if found and "task" in rect:
            x = float(re.search(r' x="([-\d.]+)"', rect).group(1))
            width = float(re.search(r' width="([-\d.]+)"', rect).group(1))
            bars[found.group(1)] = (x, width)
    return bars


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_bar_is_drawn_where_the_plan_puts_it(case, mmdc, tmp_path, capsys):
    build, extra = CASES[case]
    repo = build(tmp_path)
    out = tmp_path / "plan.json"
    assert main(["plan", "--repo", str(repo / "manifests"), "--base", "main", *extra,
                 "--json-out", str(out)]) == 0, capsys.readouterr().err
    forecast = json.loads(out.read_text())["forecast"]
    if not forecast["bars"]:
        assert forecast["mermaid"] is None
        return
    drawn = rendered_bars(mmdc, forecast["mermaid"], tmp_path)
    planned = {bar["id"]: bar for bar in forecast["bars"]}
    assert set(drawn) == set(planned)
    # One axis for all: the left edge of time zero, and pixels per second from the bar
    # that ends last.
    zero = min(x for x, _ in drawn.values())
    last = max(planned.values(), key=lambda bar: bar["end"])
    scale = (drawn[last["id"]][0] + drawn[last["id"]][1] - zero) / last["end"]
    for name, bar in planned.items():
        x, width = drawn[name]
        assert abs(x - (zero + bar["start"] * scale)) <= SLACK, (name, bar, x, zero, scale)
        assert abs(width - (bar["end"] - bar["start"]) * scale) <= SLACK, (name, bar, width)
