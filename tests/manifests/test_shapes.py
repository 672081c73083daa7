"""Services of one shape share their rendered templates; each keeps its own errors."""

from omegitops.manifests.load import load
from omegitops.render.templates import render_templates, revision_hash
from tests.conftest import RUNTIME, SERVICE, write_repo


def _service(name: str, extra: str = "", model: str = "small-model", replicas: int = 2) -> str:
    text = SERVICE.replace("name: small\n", f"name: {name}\n")
    text = text.replace("small-model", model).replace("Replicas: 2", f"Replicas: {replicas}")
    return text + extra


def _loaded(tmp_path, services: dict[str, str]):
    files = {"runtimes/small.yaml": RUNTIME,
             **{f"services/{name}.yaml": text for name, text in services.items()}}
    return load(write_repo(tmp_path, files))


def test_services_of_one_shape_get_the_templates_each_would_render_alone(tmp_path):
    loaded = _loaded(tmp_path, {"a": _service("a"), "b": _service("b", replicas=5),
                                "c": _service("c", "    runner:\n      env:\n"
                                                   "      - {name: TIER, value: gold}\n")})
    assert not loaded.result.errors
    runtime = loaded.result.catalog.runtimes
    (srt,) = runtime.values()
    for service in loaded.result.catalog.services:
        found = loaded.result.resolved[(service.id, "engine")]
        alone = render_templates(service.data, srt.data, found.lifecycle)
        assert found.templates.unpack() == alone
        assert found.revision_hash == revision_hash(alone)
    hashes = {s.id.name: loaded.result.resolved[(s.id, "engine")].revision_hash
              for s in loaded.result.catalog.services}
    assert hashes["a"] == hashes["b"] != hashes["c"]


def test_a_service_of_a_shape_seen_before_still_has_its_own_name_errors(tmp_path):
    # The same shape as "a", but a model name no label value can hold.
    bad = "x" * 70
    loaded = _loaded(tmp_path, {"a": _service("a"), "b": _service("b", model=bad)})
    (error,) = loaded.result.errors
    assert error.path == "services/b.yaml" and error.obj.name == "b"
    assert error.field == "spec.engine" and error.line == 12
    assert "would be refused by the API server" in error.message


def test_a_label_of_the_service_is_part_of_its_shape(tmp_path):
    labelled = _service("b").replace("  namespace: demo\n",
                                     "  namespace: demo\n  labels:\n    bad/key/x: v\n")
    loaded = _loaded(tmp_path, {"a": _service("a"), "b": labelled})
    (error,) = loaded.result.errors
    assert error.path == "services/b.yaml" and "bad/key/x" in error.message
