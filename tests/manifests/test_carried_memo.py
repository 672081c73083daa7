"""The carried load memo (omegitops/manifests/carried.py): what one run's load found,
signed and carried to the next run's fresh process as JSON, and read only when its
signature, code and shape are what this program writes."""

from __future__ import annotations

import datetime
import logging
import shutil

import orjson
import pytest

from omegitops.manifests import carried
from omegitops.manifests.load import load, resolved_components
from omegitops.manifests.memo import LoadMemo
from tests.conftest import EXAMPLES

KEY = b"k" * 32


def _seen(loaded):
    result = loaded.result
    return ([str(e) for e in result.errors], [str(w) for w in result.warnings],
            sorted((str(k), v[0], v[1].unpack(), v[2]) for k, v in result.resolved.items()),
            [c.lifecycle for c in resolved_components(loaded)])


def _first_run(repo):
    """A run with no memo (a new pod); the carried memo it leaves, and what it found."""
    memo = LoadMemo(None)
    loaded = load(repo, memo=memo)
    data = carried.encode(memo, KEY)
    assert data is not None
    return data, loaded


def _next_run(repo, data, key=KEY):
    memo = carried.carried_memo(data, key, None, "the report branch")
    return memo, load(repo, memo=memo)


@pytest.fixture
def repo(tmp_path):
    folder = tmp_path / "repo"
    shutil.copytree(EXAMPLES, folder)
    return folder


def test_the_next_run_takes_what_the_last_one_found(repo):
    data, first = _first_run(repo)
    memo, second = _next_run(repo, data)
    assert memo.misses == 0 and memo.hits > 0  # no file read again
    assert memo.service_hits == len(first.result.catalog.services) > 0
    assert _seen(second) == _seen(first)
    assert _seen(load(repo)) == _seen(first)  # and as a run with no memo finds it


def test_the_file_is_json_signed_and_names_the_code(repo):
    data, _ = _first_run(repo)
    head, body = data.split(b"\n", 1)
    magic, fmt, _code, signature = head.split(b" ")
    assert (magic, fmt) == (b"omegitops-carried-memo", b"1") and len(signature) == 64
    state = orjson.loads(body)
    assert set(state) == {"files", "own", "services"}


def test_a_changed_file_is_read_again_and_the_rest_is_not(repo):
    data, _ = _first_run(repo)
    changed = next((repo / "services").rglob("*.yaml"))
    changed.write_text(changed.read_text() + "\n# a comment\n")
    memo, _ = _next_run(repo, data)
    assert memo.misses == 1


def _tampered(data: bytes) -> bytes:
    head, body = data.split(b"\n", 1)
    return head + b"\n" + body.replace(b'"files":{', b'"files":{"0":[],', 1)


@pytest.mark.parametrize("how", ["tampered", "another key", "another code", "damaged",
                                 "oversized", "not a memo"])
def test_a_memo_not_ours_is_not_used(repo, how, caplog, monkeypatch):
    data, first = _first_run(repo)
    key = KEY
    if how == "tampered":
        data = _tampered(data)
    elif how == "another key":
        key = b"another key of 32 bytes at least"
    elif how == "another code":
        monkeypatch.setattr(carried, "code_fingerprint", lambda: "0" * 32)
    elif how == "damaged":  # signed, yet not shaped as written
        head, _ = data.split(b"\n", 1)
        body = b'{"files":{"x":[[1]]},"own":[],"services":{}}\n'
        first_line = b" ".join(head.split(b" ")[:3])
        data = b"%s %s\n%s" % (first_line, carried._signature(KEY, first_line + b"\n" + body)
                               .encode(), body)
    elif how == "oversized":
        monkeypatch.setattr(carried, "MAX_BYTES", len(data) - 1)
    else:
        data = b"#!/bin/sh\n" + data
    with caplog.at_level(logging.INFO, logger="omegitops.manifests.carried"):
        memo, second = _next_run(repo, data, key)
    assert memo.hits == 0 and memo.service_hits == 0
    assert _seen(second) == _seen(first)
    [record] = [r for r in caplog.records if "not read" in r.getMessage()]
    bad_signature = how in ("tampered", "another key")
    assert record.levelno == (logging.WARNING if bad_signature else logging.INFO)


def test_values_json_would_change_are_not_carried():
    """A date (YAML reads one), a tuple or a map keyed by numbers would come back other
    than they are: their files are not carried (and are read again), the others are."""
    memo = LoadMemo(None)
    memo.remember_documents("plain", [(0, 1, {"a": [1, 2.5, None, True]})])
    memo.remember_documents("date", [(0, 1, {"a": datetime.date(2024, 1, 1)})])
    memo.remember_documents("tuple", [(0, 1, {"a": (1, 2)})])
    memo.remember_documents("numbers", [(0, 1, {1: "a"})])
    files, _, _ = carried.decode(carried.encode(memo, KEY), KEY)
    assert set(files) == {"plain"}


def test_the_key_comes_from_the_environment(monkeypatch, caplog):
    monkeypatch.delenv(carried.ENV_KEY, raising=False)
    with caplog.at_level(logging.DEBUG, logger="omegitops.manifests.carried"):
        assert carried.key_from_env() is None
    assert "is not set" in caplog.text
    monkeypatch.setenv(carried.ENV_KEY, "short")
    assert carried.key_from_env() is None
    monkeypatch.setenv(carried.ENV_KEY, "a key long enough to sign with")
    assert carried.key_from_env() == b"a key long enough to sign with"
