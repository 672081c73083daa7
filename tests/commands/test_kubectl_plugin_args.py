"""``kubectl ome`` (omegitops/kubectl_plugin.py): kubectl's defaults and global flags.

The namespace comes from the kubeconfig context as kubectl takes it (the context's,
else ``default``; ``-n`` wins), flags go before or after the verb, and the lists read
on sim: through the commands the plugin stands in front of. ``rollout status``'s
progress and waiting are checked on InferenceReplicas as the job writes them.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import yaml

from omegitops import kubectl_plugin as plugin
from omegitops.cluster.sim import SimCluster
from omegitops.commands import rollout
from tests.scenario import converged


def _kubeconfig(path, current="team", contexts=None):
    contexts = contexts or {"team": "search", "bare": None}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": "u",
                                                 **({"namespace": ns} if ns else {})}}
                     for name, ns in contexts.items()],
    }))
    return path


def _args(*argv):
    return plugin.build_parser().parse_args(list(argv))


def test_the_namespace_is_the_current_contexts(tmp_path):
    config = str(_kubeconfig(tmp_path / "config"))
    args = _args("instance", "list", "svc", "--kubeconfig", config)
    assert plugin.namespace_of(args) == "search"


def test_a_context_without_a_namespace_means_default(tmp_path):
    config = str(_kubeconfig(tmp_path / "config"))
    args = _args("--kubeconfig", config, "--context", "bare", "instance", "list", "svc")
    assert plugin.namespace_of(args) == "default"


def test_the_namespace_flag_wins_over_the_context(tmp_path):
    config = str(_kubeconfig(tmp_path / "config"))
    args = _args("instance", "status", "svc", "0", "-n", "prod", "--kubeconfig", config)
    assert plugin.namespace_of(args) == "prod"


def test_kubeconfig_from_the_environment(tmp_path, monkeypatch):
    """No --kubeconfig: $KUBECONFIG (as the client read it), else ~/.kube/config."""
    from kubernetes.config import kube_config

    config = _kubeconfig(tmp_path / "config", current="bare")
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config))
    assert plugin.namespace_of(_args("instance", "list", "svc")) == "default"
    assert plugin.namespace_of(_args("--context", "team", "instance", "list")) == "search"


def test_an_unknown_context_is_an_error_naming_it(tmp_path, capsys):
    config = str(_kubeconfig(tmp_path / "config"))
    code = plugin.main(["instance", "list", "svc", "--kubeconfig", config,
                        "--context", "nope"])
    assert code == 1
    assert "nope" in capsys.readouterr().err


def test_global_flags_before_the_verb_are_kept():
    args = _args("-n", "ns", "-o", "json", "--context", "c", "instance", "list", "svc")
    assert (args.namespace, args.output, args.context) == ("ns", "json", "c")
    args = _args("rollout", "status", "svc", "-n", "ns", "--watch=false", "--timeout", "5m")
    assert (args.namespace, args.watch, args.timeout) == ("ns", False, 300.0)


def test_a_bare_watch_flag_takes_no_value(on_sim, capsys):
    """``-w svc``: as kubectl, -w is true and svc the name."""
    assert plugin.main(["rollout", "status", "-w", "svc", "-n", "demo"]) == 0
    assert "successfully rolled out" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["instance", "status", "svc", "0", "-A"],
    ["rollout", "pause", "svc", "-l", "a=b"],
    ["rollout", "resume", "svc", "-o", "json", "-n", "x"],
])
def test_flags_that_do_not_fit_one_named_object_are_usage_errors(argv, capsys):
    assert plugin.main(argv) == 2
    assert "error:" in capsys.readouterr().err


def test_help_has_examples(capsys):
    for argv in (["--help"], ["instance", "list", "--help"], ["instance", "status", "--help"],
                 ["rollout", "pause", "--help"], ["rollout", "resume", "--help"],
                 ["rollout", "promote", "--help"], ["rollout", "status", "--help"]):
        assert plugin.main(argv) == 0
        assert "examples:\n  # " in capsys.readouterr().out, argv


@pytest.mark.parametrize("text, labels", [
    ("team=search", {"team": "search"}), ("a=1, b==2", {"a": "1", "b": "2"}), (None, None)])
def test_equality_selectors(text, labels):
    assert plugin.selector_labels(text) == labels


@pytest.mark.parametrize("text", ["team", "a!=b", "env in (a,b)", "!team"])
def test_set_based_selectors_are_refused(text):
    with pytest.raises(plugin.UsageError):
        plugin.selector_labels(text)


# -- on sim: the commands behind the plugin ------------------------------------------------


@pytest.fixture
def on_sim(tmp_path, monkeypatch):
    """A converged service demo/svc, and the plugin reading that simulated cluster."""
    scenario, _change = converged(tmp_path, replicas=2)

    @contextmanager
    def opened(_args, _namespace):
        with SimCluster(scenario.path) as cluster:
            yield cluster

    monkeypatch.setattr(plugin, "opened", opened)
    return scenario


def test_instance_list_prints_the_documents_columns(on_sim, capsys):
    assert plugin.main(["instance", "list", "svc", "-n", "demo"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["IDX/INC", "PHASE", "REVISION", "PODS", "SERVING",
                                "OPERATION"]
    assert [line.split()[:2] for line in lines[1:]] == [["0/1", "Ready"], ["1/1", "Ready"]]


def test_instance_list_across_namespaces_puts_the_namespace_first(on_sim, capsys):
    assert plugin.main(["instance", "list", "-A"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["NAMESPACE", "SERVICE", "COMPONENT", "IDX/INC"]
    assert [line.split()[:4] for line in lines[1:]] == [
        ["demo", "svc", "engine", "0/1"], ["demo", "svc", "engine", "1/1"]]


def test_instance_list_of_a_namespace_without_a_name(on_sim, capsys):
    assert plugin.main(["instance", "list", "-n", "elsewhere"]) == 0
    assert capsys.readouterr().out.strip() == "No Instances found in this namespace."
    assert plugin.main(["instance", "list", "-n", "demo", "-o", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [(r["namespace"], r["inferenceService"], r["component"], r["index"])
            for r in found] == [("demo", "svc", "engine", 0), ("demo", "svc", "engine", 1)]


def test_instance_status_as_yaml(on_sim, capsys):
    assert plugin.main(["instance", "status", "svc", "1", "-n", "demo", "-o", "yaml"]) == 0
    found = yaml.safe_load(capsys.readouterr().out)
    assert (found["index"], found["phase"], found["events"]) == (1, "Ready", [])


def test_rollout_pause_and_resume_in_the_contexts_namespace(on_sim, tmp_path, capsys):
    config = str(_kubeconfig(tmp_path / "config", contexts={"team": "demo"}))
    assert plugin.main(["rollout", "pause", "svc", "--by", "oncall",
                        "--kubeconfig", config]) == 0
    assert "svc (engine) in demo paused by oncall" in capsys.readouterr().out
    assert plugin.main(["rollout", "resume", "svc", "--kubeconfig", config]) == 0
    assert capsys.readouterr().out.strip().endswith("resumed")


def test_rollout_status_of_a_converged_service(on_sim, capsys):
    assert plugin.main(["rollout", "status", "svc", "-n", "demo"]) == 0
    assert capsys.readouterr().out.strip() == (
        "rollout of svc (engine) in demo successfully rolled out")


# -- rollout status ------------------------------------------------------------------------


def _replica(desired=3, updated=3, current=3, available=3, hold=None, generation=2,
             observed=2):
    return {"metadata": {"name": "svc-engine", "namespace": "demo", "generation": generation},
            "spec": {"replicas": desired, "revision": "svc-engine-0000000b"},
            "status": {"observedGeneration": observed, "updateRevision": "svc-engine-0000000b",
                       "replicas": current, "updatedReplicas": updated,
                       "readyReplicas": available, "availableReplicas": available,
                       "rolloutHold": hold}}


@pytest.mark.parametrize("replica, line", [
    (_replica(observed=1), ("Waiting for the rollout of svc (engine) in demo to be observed "
                           "by the next pass...")),
    (_replica(updated=1), ("Waiting for rollout of svc (engine) in demo to finish: 1 out of 3 "
                          "new Instances have been updated...")),
    (_replica(current=4), ("Waiting for rollout of svc (engine) in demo to finish: 1 old "
                          "Instances are pending termination...")),
    (_replica(available=2), ("Waiting for rollout of svc (engine) in demo to finish: 2 of 3 "
                            "updated Instances are available...")),
    (_replica(), "rollout of svc (engine) in demo successfully rolled out"),
])
def test_progress_lines(replica, line):
    found = rollout.progress(replica, "svc (engine) in demo")
    assert found.line() == line
    assert found.done == line.startswith("rollout of")


class _Replicas:
    """A cluster whose InferenceReplica is the next of ``states`` at each read."""

    def __init__(self, *states):
        self.states = list(states)

    def get_object(self, _kind, _namespace, _name):
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def _follow(cluster, **kwargs):
    clock = _Clock()
    return rollout.follow(cluster, "demo", "svc", "engine", clock=clock, sleep=clock.sleep,
                          **{"watch": True, "timeout": 0.0, **kwargs})


def test_status_waits_for_the_end_printing_each_change_once(capsys):
    paused = {"gate": "Paused", "by": "oncall", "since": "2026-01-01T00:00:00Z",
              "reason": "paused on the cluster"}
    cluster = _Replicas(_replica(updated=1, hold=paused), _replica(updated=1, hold=paused),
                        _replica(updated=2), _replica())
    assert _follow(cluster) == 0
    assert capsys.readouterr().out.splitlines() == [
        ("Waiting for rollout of svc (engine) in demo to finish: 1 out of 3 new Instances "
        "have been updated..."),
        "  held (Paused by oncall since 2026-01-01T00:00:00Z): paused on the cluster",
        ("Waiting for rollout of svc (engine) in demo to finish: 2 out of 3 new Instances "
        "have been updated..."),
        "rollout of svc (engine) in demo successfully rolled out",
    ]


def test_status_without_watch_looks_once_and_exits_0(capsys):
    assert _follow(_Replicas(_replica(updated=1), _replica()), watch=False) == 0
    assert "1 out of 3" in capsys.readouterr().out


def test_status_past_its_timeout_exits_1(capsys):
    assert _follow(_Replicas(_replica(updated=1)), timeout=5.0, output="json") == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["done"] is False
    assert "timed out" in captured.err


def test_omegitops_rollout_status_on_sim(on_sim, capsys):
    from omegitops.cli import main

    assert main(["rollout", "status", "svc", "-n", "demo", "--cluster",
                 f"sim:{on_sim.path}", "-o", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["done"], found["desired"], found["updated"]) == (True, 2, 2)
