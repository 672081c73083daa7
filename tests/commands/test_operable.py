"""What a platform team alerts on: JSON log lines, a WARNING per component that needs a
person, ``--fail-on-degraded`` and the run's metrics in Prometheus's text format."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import EXAMPLES
from tests.scenario import converged

SURGE = {"updateStrategy": {"type": "SurgeThenDrain"}}


def held_revision(tmp_path):
    """A one-service repository whose new image never pulls: its revision is held."""
    values = {"lifecycle": {"stuckPodGracePeriod": "60s"}}
    scenario, change = converged(tmp_path, replicas=1, values=values, lifecycle=SURGE)
    scenario.fault("imagepull", image="sglang:unpullable")
    change(image="sglang:unpullable")
    scenario.until(lambda s: bool(s.events("RevisionHeld")))
    return scenario


def samples(text: str) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_json_log_lines_carry_time_level_and_the_component(tmp_path, cli, monkeypatch):
    scenario = held_revision(tmp_path)
    monkeypatch.setenv("OMEGITOPS_LOG_FORMAT", "json")
    code, _, err = cli("reconcile", "--repo", str(scenario.repo),
                       "--cluster", f"sim:{scenario.path}")
    assert code == 0, err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert lines and all({"time", "level", "logger", "message"} <= set(e) for e in lines)
    assert all(e["time"].endswith("Z") for e in lines)
    (held,) = [e for e in lines if e.get("reason") == "RevisionHeld"]
    assert held["level"] == "WARNING"
    assert (held["namespace"], held["component"]) == ("demo", "engine")
    assert "ome.io/release-revision=" in held["action"]


def test_a_held_revision_is_a_warning_and_with_fail_on_degraded_exit_3(tmp_path, cli):
    scenario = held_revision(tmp_path)
    args = ["reconcile", "--repo", str(scenario.repo), "--cluster", f"sim:{scenario.path}"]
    code, _, err = cli(*args)
    assert code == 0, err
    warning = [line for line in err.splitlines() if line.startswith("WARNING")
               and "RevisionHeld" in line]
    assert len(warning) == 1 and "release this one: kubectl annotate" in warning[0]
    code, _, err = cli(*args, "--fail-on-degraded")
    assert code == 3
    assert "1 component Degraded or waiting for a person (--fail-on-degraded)" in err


def test_fail_on_degraded_lets_a_healthy_fleet_exit_0(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--until-idle",
                       "--fail-on-degraded")
    assert code == 0, err
    assert "WARNING" not in err


def test_the_metrics_file_says_what_the_report_says(tmp_path, cli):
    scenario = held_revision(tmp_path)
    out = tmp_path / "omegitops.prom"
    code, _, err = cli("reconcile", "--repo", str(scenario.repo), "--cluster",
                       f"sim:{scenario.path}", "--metrics-file", str(out),
                       "--fail-on-degraded")
    assert code == 3, err
    found = samples(out.read_text())
    key = (("component", "engine"), ("namespace", "demo"), ("service", "svc"))
    assert found[("omegitops_revision_held", key)] == 1
    assert found[("omegitops_needs_person", key)] == 1
    assert found[("omegitops_component_health", tuple(sorted(key + (("health",
                                                                       "Degraded"),))))] == 1
    assert found[("omegitops_instances_desired", key)] == 1
    assert found[("omegitops_run_exit_code", ())] == 3
    assert found[("omegitops_run_passes", ())] == 1
    assert found[("omegitops_run_duration_seconds", ())] > 0


class _Gateway(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_PUT(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.command, self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def gateway():
    server = HTTPServer(("127.0.0.1", 0), _Gateway)
    _Gateway.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", _Gateway.received
    server.shutdown()
    thread.join()


def test_the_metrics_are_pushed_to_a_pushgateway_by_shard(tmp_path, cli, gateway,
                                                          monkeypatch):
    url, received = gateway
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES), "--metrics-push", url)
    assert code == 0, err
    ((method, path, body),) = received
    assert (method, path) == ("PUT", "/metrics/job/omegitops/shard/all")
    assert b"omegitops_component_health" in body


def test_a_pushgateway_away_is_a_warning_not_a_failed_run(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("reconcile", "--repo", str(EXAMPLES),
                       "--metrics-push", "http://user:secret@127.0.0.1:9")
    assert code == 0, err
    assert "the metrics were not pushed to http://***@127.0.0.1:9" in err
    assert "secret" not in err
