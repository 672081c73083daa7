"""A report folder or simulated cluster that cannot be written: refused before the
cluster is touched when that can be known, and one line, exit 1, when the disk fills
up at the end; never a traceback, never a reconcile lost."""

from __future__ import annotations

import errno
import json

import pytest

from omegitops.cluster.sim import store
from omegitops.report import status
from tests.conftest import EXAMPLES


def disk_full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", "/data/full")


def test_a_report_folder_on_no_writable_file_system_is_refused_before_the_reconcile(
        cli, tmp_path):
    cluster = tmp_path / "c.json"
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{cluster}",
                       "--report-dir", "/proc/omegitops-report")
    assert code == 1
    assert err.startswith("omegitops: error: the report cannot be written: "
                          "/proc/omegitops-report cannot be written (")
    assert "nothing was reconciled" in err
    assert not cluster.exists()


def test_a_report_folder_refused_by_the_system_is_refused_before_the_reconcile(
        cli, tmp_path, monkeypatch):
    # What a read-only mount does (root writes anywhere else, so the refusal is given).
    monkeypatch.setattr(status, "unwritable_folder",
                        lambda _folder: OSError(errno.EROFS, "Read-only file system"))
    cluster = tmp_path / "c.json"
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{cluster}",
                       "--report-dir", str(tmp_path / "status"))
    assert code == 1
    assert "cannot be written (Read-only file system); nothing was reconciled" in err
    assert not cluster.exists()


def test_a_disk_that_fills_up_under_the_report_keeps_what_the_run_applied(
        cli, tmp_path, monkeypatch):
    monkeypatch.setattr(status, "replace_atomically", disk_full)
    cluster = tmp_path / "c.json"
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{cluster}",
                       "--report-dir", str(tmp_path / "status"))
    assert code == 1
    assert err.splitlines()[-1] == (
        "omegitops: error: the report could not be written: /data/full: No space left on "
        "device; what the run applied is kept, and the next run writes the report")
    saved = json.loads(cluster.read_text())
    assert saved["objects"]["Pod"], "the reconcile's pods were saved"


@pytest.mark.parametrize("folder", ["/proc/omegitops-sim", "/sys"])
def test_a_simulated_cluster_where_no_file_can_be_made_is_refused_first(cli, folder):
    code, _, err = cli("sim", "init", "--cluster", f"sim:{folder}/c.json")
    assert code == 1
    assert err.startswith("omegitops: error: cannot lock the simulated cluster: ")
    assert err.endswith("; nothing was done\n")


def test_a_file_where_the_simulated_cluster_folder_should_be(cli, tmp_path):
    (tmp_path / "taken").write_text("")
    code, _, err = cli("sim", "show", "--cluster", f"sim:{tmp_path / 'taken' / 'c.json'}")
    assert code == 1
    assert "taken is a file, not a folder" in err


def test_a_simulated_cluster_folder_that_refuses_writes_is_refused_before_the_reconcile(
        cli, tmp_path, monkeypatch):
    cluster = tmp_path / "c.json"
    assert cli("sim", "init", "--cluster", f"sim:{cluster}")[0] == 0
    before = cluster.read_bytes()
    monkeypatch.setattr(store, "unwritable_folder",
                        lambda _folder: OSError(errno.EROFS, "Read-only file system"))
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--cluster", f"sim:{cluster}")
    assert code == 1
    assert err.splitlines()[-1] == (
        f"omegitops: error: {cluster}: the simulated cluster cannot be saved there "
        "(Read-only file system); nothing was done")
    assert cluster.read_bytes() == before


def test_a_disk_that_fills_up_under_the_simulated_cluster_is_one_line(
        cli, tmp_path, monkeypatch):
    cluster = tmp_path / "c.json"
    assert cli("sim", "init", "--cluster", f"sim:{cluster}")[0] == 0
    before = cluster.read_bytes()
    monkeypatch.setattr(store, "replace_atomically", disk_full)
    code, _, err = cli("sim", "advance", "--cluster", f"sim:{cluster}", "--seconds", "10")
    assert code == 1
    assert err == (f"omegitops: error: the simulated cluster could not be saved: /data/full: "
                   f"No space left on device; {cluster} keeps its state from before\n")
    assert cluster.read_bytes() == before
