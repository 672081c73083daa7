"""Command-line inputs that used to end in a traceback, a hang or a read that never
ends: each is a one-line error with an exit code (2 for a usage error, 1 for bad
input), before anything is touched."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import EXAMPLES


@pytest.mark.parametrize("args, code, said", [
    (["reconcile", "--until-idle", "--max-seconds", "nan"], 2, "not a number of seconds"),
    (["reconcile", "--until-idle", "--max-seconds", "inf"], 2, "not a number of seconds"),
    (["reconcile", "--until-idle", "--max-seconds", "1e300"], 2, "ten years"),
    (["reconcile", "--until-idle", "--max-seconds", "-5"], 2, "not a number of seconds"),
    (["plan", "--forecast-seconds", "nan"], 2, "not a number of seconds"),
])
def test_a_number_of_seconds_that_is_none_is_a_usage_error(tmp_path, cli, args, code, said):
    got, _, err = cli(*args, "--repo", str(EXAMPLES), "--cluster",
                        f"sim:{tmp_path / 'c.json'}" if args[0] == "reconcile" else "")
    assert got == code and said in err and "Traceback" not in err, err
    assert not (tmp_path / "c.json").exists()


def test_output_files_are_checked_before_the_plan_is_made(tmp_path, cli):
    got, _, err = cli("plan", "--repo", str(EXAMPLES), "--comment-out",
                      str(tmp_path / "missing" / "comment.md"))
    assert got == 2 and "does not exist" in err, err
    got, _, err = cli("plan", "--repo", str(EXAMPLES), "--json-out", str(tmp_path))
    assert got == 2 and "is a folder, not a file" in err, err


def test_a_malformed_url_is_named_with_its_secret_hidden(tmp_path, cli):
    got, out, err = cli("reconcile", "--repo", "https://bob:S3KR1T@[::1/x.git",
                        "--cluster", f"sim:{tmp_path / 'c.json'}")
    assert got == 1 and "is not a valid URL" in err and "Traceback" not in err, err
    assert "S3KR1T" not in out + err


def test_a_simulated_cluster_that_is_a_fifo_or_a_device_is_refused_unread(tmp_path, cli):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (fifo, "/dev/zero"):
        got, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{target}")
        assert got == 1 and "not a regular file" in err, err


def test_a_simulated_clock_past_the_year_9000_is_refused(tmp_path, cli):
    state = tmp_path / "c.json"
    assert cli("sim", "init", "--cluster", f"sim:{state}")[0] == 0
    data = json.loads(state.read_text())
    data["clock"] = "9999-12-31T23:00:00Z"
    state.write_text(json.dumps(data))
    got, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{state}",
                      "--until-idle")
    assert got == 1 and "past the year 9000" in err and "Traceback" not in err, err


def test_an_empty_repo_is_a_usage_error_and_a_file_is_named_as_one(tmp_path, cli):
    got, _, err = cli("reconcile", "--repo", "", "--cluster", f"sim:{tmp_path / 'c.json'}")
    assert got == 2 and "--repo is empty" in err, err
    afile = tmp_path / "manifest.yaml"
    afile.write_text("kind: Namespace\n")
    got, _, err = cli("reconcile", "--repo", str(afile), "--cluster",
                      f"sim:{tmp_path / 'c.json'}")
    assert got == 1 and "a file, not a folder" in err, err
    assert not (tmp_path / "c.json").exists()


def test_an_empty_token_file_is_named(tmp_path, cli, monkeypatch):
    token = tmp_path / "token"
    token.write_text("\n")
    monkeypatch.setenv("GIT_TOKEN_FILE", str(token))
    monkeypatch.delenv("GIT_TOKEN", raising=False)
    got, _, err = cli("reconcile", "--repo", "https://example.invalid/manifests.git",
                      "--cluster", f"sim:{tmp_path / 'c.json'}")
    assert got == 1 and f"GIT_TOKEN_FILE {token} is empty" in err, err
