"""The load memo (omegitops/manifests/memo.py): what loading found for inputs seen
before is reused, and only for exactly those inputs."""

from __future__ import annotations

import logging
import marshal
import os
import shutil

from omegitops.manifests import memo as memo_module
from omegitops.manifests.load import load, resolved_components
from omegitops.manifests.memo import FILE_NAME, _header, memo_for
from tests.conftest import EXAMPLES, RUNTIME, SERVICE, write_repo


def _seen(loaded):
    """All a load found, as comparable values."""
    result = loaded.result
    return ([str(e) for e in result.errors], [str(w) for w in result.warnings],
            sorted((str(k), v[0], v[1].unpack()) for k, v in result.resolved.items()),
            [(s.path, s.line, s.kind) for s in loaded.repo.skipped])


def _fresh(tmp_path, name="cache"):
    """A memo folder no earlier test used, read anew (as the next run's process does)."""
    folder = tmp_path / name
    memo_module.forget(folder)
    return folder


def test_a_second_run_finds_the_same_from_the_memo(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repo)
    cache = _fresh(tmp_path)
    first = load(repo, cache_dir=cache)
    assert (cache / FILE_NAME).is_file()
    after_first = memo_for(cache)
    assert after_first.hits == 0 and after_first.misses > 0

    cache = _fresh(tmp_path)  # the next run: a new process reads the memo's file
    second = load(repo, cache_dir=cache)
    assert memo_for(cache).hits == after_first.misses
    assert memo_for(cache).misses == 0
    assert _seen(second) == _seen(first)
    assert [c.lifecycle for c in resolved_components(second)] == \
        [c.lifecycle for c in resolved_components(first)]
    uncached = load(repo, cache_dir=None)
    assert _seen(uncached) == _seen(first)


def test_an_error_on_a_remembered_file_names_its_field_line(tmp_path):
    """The service's file is read from the memo (no node tree), yet the error the
    runtime's removal causes names spec.runtime.name's own line."""
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME,
                                          "svc.yaml": "# a comment\n" + SERVICE.lstrip()})
    cache = _fresh(tmp_path)
    assert load(repo, cache_dir=cache).result.ok
    (repo / "runtime.yaml").unlink()
    cache = _fresh(tmp_path)
    loaded = load(repo, cache_dir=cache)
    assert memo_for(cache).hits == 1  # svc.yaml
    [error] = loaded.result.errors
    line = (repo / "svc.yaml").read_text().splitlines().index("    name: srt-small") + 1
    assert (error.path, error.line, error.field) == ("svc.yaml", line, "spec.runtime.name")


def test_a_changed_input_is_found_anew(tmp_path):
    """The runtime's image, the operator settings and the file's bytes each make a new
    key: nothing found for the old input stands for the new one."""
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME, "svc.yaml": SERVICE})
    cache = _fresh(tmp_path)
    before = resolved_components(load(repo, cache_dir=cache))
    (repo / "runtime.yaml").write_text(RUNTIME.replace("v0.5.5", "v0.5.6"))
    after = resolved_components(load(repo, cache_dir=_fresh(tmp_path)))
    image = [c.templates["default"]["spec"]["containers"][0]["image"] for c in (before + after)]
    assert image == ["docker.io/lmsysorg/sglang:v0.5.5", "docker.io/lmsysorg/sglang:v0.5.6"]

    (repo / "ome-values.yaml").write_text(
        "ome:\n  controller:\n    updateStrategy:\n      engine:\n        maxSurge: 2\n")
    surged = resolved_components(load(repo, cache_dir=_fresh(tmp_path)))
    assert surged[0].lifecycle.fields["updateStrategy.rollingUpdate.maxSurge"].value == 2

    (repo / "svc.yaml").write_text(SERVICE.replace("minReplicas: 2", "minReplicas: -1"))
    broken = load(repo, cache_dir=_fresh(tmp_path))
    assert [e.field for e in broken.result.errors] == ["spec.engine.minReplicas"]


def test_a_memo_from_other_code_or_a_damaged_one_is_not_read(tmp_path, monkeypatch):
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME, "svc.yaml": SERVICE})
    cache = _fresh(tmp_path)
    load(repo, cache_dir=cache)
    monkeypatch.setattr(memo_module, "_CODE", "another version")
    cache = _fresh(tmp_path)
    load(repo, cache_dir=cache)
    assert memo_for(cache).hits == 0
    monkeypatch.undo()

    (cache / FILE_NAME).write_bytes(b"\x80\x05not a pickle")
    cache = _fresh(tmp_path)
    assert load(repo, cache_dir=cache).result.ok
    assert memo_for(cache).hits == 0
    # A folder the run cannot write only costs the work the memo would have saved.
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder would be")
    memo_module.forget(blocked)
    assert load(repo, cache_dir=blocked).result.ok


def test_a_file_read_with_errors_is_never_remembered(tmp_path):
    """A file with an error is read (and its error placed) anew each run."""
    repo = write_repo(tmp_path / "repo", {
        "runtime.yaml": RUNTIME, "svc.yaml": SERVICE,
        "bad.yaml": "apiVersion: ome.io/v1beta1\nkind: InferenceService\nmetadata:\n"
                    "  name: x\n  labels: {1: a}\n"})
    for _ in range(2):
        cache = _fresh(tmp_path)
        loaded = load(repo, cache_dir=cache)
        assert [(e.path, e.line) for e in loaded.result.errors] == [("bad.yaml", 5)]
    assert memo_for(cache).hits == 2  # runtime.yaml and svc.yaml, not bad.yaml


def test_a_memo_others_can_write_is_not_read(tmp_path):
    """A memo file that another user could have written (a shared folder) is never
    read."""
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME, "svc.yaml": SERVICE})
    cache = _fresh(tmp_path)
    load(repo, cache_dir=cache)
    (cache / FILE_NAME).chmod(0o666)
    cache = _fresh(tmp_path)
    assert load(repo, cache_dir=cache).result.ok
    assert memo_for(cache).hits == 0


def _remembered(tmp_path):
    """A repository and a cache folder whose memo knows it."""
    repo = write_repo(tmp_path / "repo", {"runtime.yaml": RUNTIME, "svc.yaml": SERVICE})
    cache = _fresh(tmp_path)
    load(repo, cache_dir=cache)
    assert (cache / FILE_NAME).is_file()
    return repo, cache


def _hits(repo, cache):
    cache = _fresh(cache.parent, cache.name)
    assert load(repo, cache_dir=cache).result.ok
    return memo_for(cache).hits


def test_a_memo_planted_as_a_link_is_not_followed(tmp_path, caplog):
    """Another user plants the memo's name as a link to a file of ours whose bytes they
    chose (a file of a pull request's clone): the link is never followed."""
    repo, cache = _remembered(tmp_path)
    planted = tmp_path / "clone-file"
    (cache / FILE_NAME).rename(planted)
    (cache / FILE_NAME).symlink_to(planted)
    with caplog.at_level(logging.WARNING):
        assert _hits(repo, cache) == 0
    assert "it is a link" in caplog.text
    (cache / FILE_NAME).unlink()
    planted.rename(cache / FILE_NAME)
    assert _hits(repo, cache) > 0  # the same bytes, as a file of ours, are read


def test_a_memo_of_another_user_is_not_read(tmp_path, caplog):
    repo, cache = _remembered(tmp_path)
    os.chown(cache / FILE_NAME, os.getuid() + 4242, -1)
    with caplog.at_level(logging.WARNING):
        assert _hits(repo, cache) == 0
    assert "not read" in caplog.text


def test_a_folder_others_can_write_is_not_used_unless_ours_and_sticky(tmp_path, caplog):
    repo, cache = _remembered(tmp_path)
    cache.chmod(0o777)
    written = (cache / FILE_NAME).stat().st_mtime_ns
    (repo / "more.yaml").write_text(RUNTIME.replace("srt-small", "srt-other"))
    with caplog.at_level(logging.WARNING):
        assert _hits(repo, cache) == 0
    assert "other users can write it" in caplog.text
    assert (cache / FILE_NAME).stat().st_mtime_ns == written  # nor written
    assert [p.name for p in cache.iterdir()] == [FILE_NAME]

    cache.chmod(0o1777)  # sticky and ours: no one else can replace our file
    assert _hits(repo, cache) > 0
    os.chown(cache, os.getuid() + 4242, -1)  # sticky, but another user's
    assert _hits(repo, cache) == 0


def test_a_memo_written_is_private_and_whole(tmp_path):
    _, cache = _remembered(tmp_path)
    mode = (cache / FILE_NAME).stat().st_mode
    assert mode & 0o077 == 0
    assert [p.name for p in cache.iterdir()] == [FILE_NAME]  # no temporary file left
    assert not (cache / FILE_NAME).read_bytes().startswith(b"\x80")  # not a pickle


def _rewrite(cache, change):
    """Change the memo's body and give it a header that matches (as only its owner
    could): what is left to catch is the content itself."""
    data = (cache / FILE_NAME).read_bytes()
    state = marshal.loads(data[data.index(b"\n") + 1:])
    change(state)
    body = marshal.dumps(state)
    (cache / FILE_NAME).write_bytes(_header(body) + body)


def test_a_tampered_memo_is_ignored_not_crashed_on(tmp_path):
    repo, cache = _remembered(tmp_path)
    clean = (cache / FILE_NAME).read_bytes()
    # A damaged body under its old header: the digest no longer matches.
    (cache / FILE_NAME).write_bytes(clean[:-10] + b"x" * 10)
    assert _hits(repo, cache) == 0
    # Content shaped otherwise than written, each with a matching header.
    for change in (
        lambda s: s.update(files={"k": 1}),
        lambda s: s.update(own=[("k", "x")]),
        lambda s: s.update(saves="many"),
        lambda s: s.clear(),
    ):
        (cache / FILE_NAME).write_bytes(clean)
        _rewrite(cache, change)
        assert _hits(repo, cache) == 0
    # Entries whose bytes are not what was written: each is a miss, the load is whole.
    (cache / FILE_NAME).write_bytes(clean)
    _rewrite(cache, lambda s: s.update(
        files={k: b"garbage" for k in s["files"]},
        services={k: marshal.dumps(([("a", "b")], [], True)) for k in s["services"]}))
    cache = _fresh(tmp_path)
    loaded = load(repo, cache_dir=cache)
    assert loaded.result.ok and loaded.result.resolved
    assert memo_for(cache).hits == 0
    for bad in ([], (1, 2), ([], [(("k", "n", "x"), "engine", (), b"", "h")], True),
                ([], [], "yes"), b"\x00not marshal"):
        (cache / FILE_NAME).write_bytes(clean)
        _rewrite(cache, lambda s, bad=bad: s.update(services={
            k: bad if isinstance(bad, bytes) else marshal.dumps(bad) for k in s["services"]}))
        cache = _fresh(tmp_path)
        assert load(repo, cache_dir=cache).result.resolved


def test_the_autoscaling_bounds_come_back_from_the_memo(tmp_path):
    """minReplicas < maxReplicas hands the count to an autoscaler: a run that reads the
    component from the memo must not find Git owning it."""
    from tests.fleet import write_service

    repo = write_service(tmp_path / "repo", replicas=1, max_replicas=4)
    load(repo, cache_dir=_fresh(tmp_path))
    cache = _fresh(tmp_path)  # the next run: a new process reads the memo's file
    second = load(repo, cache_dir=cache)
    assert memo_for(cache).hits > 0
    assert [c.lifecycle.bounds for c in resolved_components(second)] == [(1, 4)]


def _settings_pack(**changes):
    """A component's settings as the memo packs them, with ``changes``."""
    from dataclasses import fields

    from omegitops.model.settings import ComponentSettings

    settings = ComponentSettings()
    values = {f.name: getattr(settings, f.name) for f in fields(settings)}
    values["update_retry"] = None
    return {**values, **changes}


def test_values_unpacked_alike_are_shared_and_equal_values_of_other_types_are_not():
    """A fleet's components come back from the memo as a few dozen distinct values, each
    built once and shared; a value equal to another but of another type (1, 1.0, True)
    is its own, as resolving the manifest anew would give it."""
    from omegitops.manifests import findings

    first = findings._unpack_resolved((30, "isvc", ("spec", "engine", "lifecycle")))
    again = findings._unpack_resolved((30, "isvc", ("spec", "engine", "lifecycle")))
    assert again is first
    for other in (30.0, True):
        found = findings._unpack_resolved((other, "isvc", ("spec", "engine", "lifecycle")))
        assert type(found.value) is type(other) and found is not first
    group = findings._unpack_resolved(({"name": "g"}, "isvc", ("spec", "rollout")))
    assert findings._unpack_resolved(({"name": "g"}, "isvc", ("spec", "rollout"))) \
        is not group  # a dict can change: never shared

    plain = findings._unpack_settings(_settings_pack(update_retry=(3, 1)))
    assert findings._unpack_settings(_settings_pack(update_retry=(3, 1))) is plain
    floated = findings._unpack_settings(_settings_pack(update_retry=(3, 1.0)))
    assert type(floated.update_retry.initial_backoff) is float
    assert findings._unpack_settings(_settings_pack(min_ready_seconds=7)).min_ready_seconds == 7


def test_a_damaged_value_is_refused_though_an_equal_one_was_shared():
    """What the shared values hold back is only the building: a damaged entry is still
    refused, whatever was unpacked before it."""
    import pytest

    from omegitops.manifests import findings

    findings._unpack_resolved(("SurgeThenDrain", "isvc", ("spec",)))
    for bad in (("SurgeThenDrain", 3, ("spec",)), ("SurgeThenDrain", "isvc", "spec"),
                ("SurgeThenDrain", "isvc", ([],)), ["SurgeThenDrain", "isvc", ("spec",)]):
        with pytest.raises(findings.NotAFinding):
            findings._unpack_resolved(bad)
    findings._unpack_settings(_settings_pack())
    with pytest.raises(findings.NotAFinding):
        findings._unpack_settings(_settings_pack(min_ready_seconds="30"))
    with pytest.raises(findings.NotAFinding):
        findings._unpack_settings({**_settings_pack(), "unknown": 1})
