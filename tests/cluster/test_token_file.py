"""TokenFile: a bearer token read from a file, again each minute and after a 401."""

from __future__ import annotations

from kubernetes.client import Configuration

from omegitops.cluster.kube.token import TokenFile


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_file_is_read_again_once_a_minute_as_client_go_does(tmp_path):
    path, clock, configuration = tmp_path / "token", Clock(), Configuration()
    path.write_text("first\n")
    TokenFile(path, clock=clock).install(configuration)
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer first"
    path.write_text("second")
    clock.now += 59
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer first"
    clock.now += 1
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer second"


def test_after_a_refusal_a_new_token_is_read_at_once_and_the_same_one_is_not_retried(
        tmp_path):
    path, clock, configuration = tmp_path / "token", Clock(), Configuration()
    path.write_text("first")
    source = TokenFile(path, clock=clock)
    source.install(configuration)
    assert source.expire() is False  # nothing new: the refusal stands
    path.write_text("second")
    assert source.expire() is True
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer second"


def test_an_empty_or_missing_file_keeps_the_last_token(tmp_path):
    path, clock, configuration = tmp_path / "token", Clock(), Configuration()
    path.write_text("first")
    TokenFile(path, clock=clock).install(configuration)
    path.write_text("")
    clock.now += 60
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer first"
    path.unlink()
    clock.now += 60
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer first"
