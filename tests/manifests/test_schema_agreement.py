"""The compiled validator and jsonschema agree on every manifest we have.

``schema_errors`` trusts jsonschema-rs's yes and asks jsonschema only for the
errors of a no; a manifest one accepts and the other refuses would be acted on
(or refused) silently. This holds them to the same answers.
"""

from pathlib import Path

import pytest
import yaml

from omegitops.manifests.schemas import is_valid, validator
from tests.conftest import EXAMPLES, SHARED_OME

KINDS = ("InferenceService", "ServingRuntime", "ClusterServingRuntime")
CORPUS = Path(__file__).parent / "corpus"


def documents(root: Path):
    for path in sorted(root.rglob("*.yaml")):
        try:
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
                if isinstance(doc, dict) and doc.get("kind") in KINDS:
                    yield f"{path}", doc
        except (yaml.YAMLError, UnicodeDecodeError, ValueError):
            continue  # files that do not load are the loader's business


def roots():
    found = [EXAMPLES, CORPUS]
    if SHARED_OME.is_dir():
        found += [SHARED_OME / "isvc", SHARED_OME / "runtimes"]
    return found


@pytest.mark.parametrize("root", roots(), ids=lambda p: p.name)
def test_both_validators_agree(root):
    checked = 0
    for where, doc in documents(root):
        kind = doc["kind"]
        slow = not any(True for _ in validator(kind).iter_errors(doc))
        assert is_valid(kind)(doc) == slow, where
        checked += 1
    assert checked
