"""docs/rollouts.md, run as a reader would: each shell block of the prefill/decode
canary walkthrough, in order, in a copy of ``examples/`` on the simulated cluster, each
succeeding, and what the text says each shows there."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.conftest import EXAMPLES
from tests.project.test_getting_started import omegitops_on_path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "rollouts.md"


def blocks() -> list[str]:
    """The guide's shell blocks, each run whole (a block may hold a here-document)."""
    return re.findall(r"```sh\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.DOTALL)


def _line(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(name + " "))


def test_the_prefill_decode_canary_walkthrough_runs_as_written(tmp_path):
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    env = omegitops_on_path(tmp_path)
    shown = []
    steps = blocks()
    assert len(steps) == 5, steps
    for block in steps:
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], check=False,
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{block}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        shown.append(done.stdout)
    rest, declared, planned, first, promoted = shown
    # 1. At rest: two engines and one decoder.
    assert re.search(r"llama-pd-engine\s+engine\s+2\s+2\s+2", rest), rest
    assert re.search(r"llama-pd-decoder\s+decoder\s+1\s+1\s+1", rest), rest
    # 2. The group and the steps, resolved for both members from spec.rollout.
    for member in ("engine", "decoder"):
        assert re.search(rf"llama-pd +{member} +group +name=pd,components=\['engine', "
                         rf"'decoder'\] +isvc \(spec.rollout.groups.0\)", declared), declared
        assert re.search(rf"llama-pd +{member} +canary.steps .*spec.rollout.canary.steps",
                         declared), declared
    # 3. The plan: both members change; the forecast stops at step 1 for a promotion.
    assert "llama-demo/llama-pd engine" in planned and "llama-demo/llama-pd decoder" in (
        planned), planned
    assert "**Canary** in 2 steps" in planned, planned
    assert planned.count("**Rollout group** `pd` (engine, decoder): moves in step") == 2
    assert "omegitops rollout promote llama-pd -c engine -n llama-demo" in planned
    # 4. The first step: the engine waits for the promotion, the decoder moved with it.
    engine, decoder = (_line(first, "llama-pd-engine"), _line(first, "llama-pd-decoder"))
    assert engine.split()[-3:] == ["CanaryStep", "1/2", "promotion"], engine
    assert decoder.split()[-2:] == ["<none>", "<none>"], decoder
    revisions = {line.split()[0]: line.split()[2] for line in first.splitlines()
                 if re.match(r"^[01]/1 ", line)}
    new = engine.split()[-4]  # REVISION: the revision the engine moves to
    assert revisions["1/1"] == new and revisions["0/1"] != new, (revisions, engine)
    # 5. The promotion takes the group; the rest moves; nothing holds.
    assert "rollout group pd: every member takes the step" in promoted, promoted
    assert "promoted by alice" in promoted and "llama-pd (decoder) in llama-demo: no canary " \
        "step waits" in promoted, promoted
    engine = _line(promoted, "llama-pd-engine")
    assert engine.split()[-2:] == ["<none>", "<none>"], engine
    assert promoted.count("component=engine instance=") >= 2, promoted
    assert "component=decoder instance=0 updated" in promoted, promoted
