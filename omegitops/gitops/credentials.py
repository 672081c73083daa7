"""Git credentials: where they come from, how git gets them, and keeping them out of sight.

Credentials reach git through an environment-scoped credential helper
(``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n``), never
through the URL or the command line: the helper is an inline shell function
that prints two variables of git's own environment, so the secret is in no
argument, no file, no ``.git/config`` and no process title. The helper is
scoped to the repository's scheme and host, so a redirect elsewhere never
receives it.

Sources, first found wins:

1. ``user:password@`` in an https URL (taken out of the URL before git sees it);
2. ``GIT_TOKEN`` (with ``GIT_USERNAME``), e.g. from a Kubernetes Secret as env;
3. the file named by ``GIT_TOKEN_FILE`` (with ``GIT_USERNAME`` or a
   ``username`` file beside it), e.g. a mounted Secret.

Every URL shown to a person goes through ``redact`` first, and any text that
came from git goes through ``scrub``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast
from urllib.parse import unquote, urlsplit, urlunsplit

# GitHub accepts any user name with a token; this one is what its docs use.
DEFAULT_USERNAME = "x-access-token"
HIDDEN = "***"
# Environment variables private to the helper (read by the git child only).
HELPER_USERNAME, HELPER_PASSWORD = "OMEGITOPS_GIT_USERNAME", "OMEGITOPS_GIT_PASSWORD"
# Prints git's credential protocol on `get`; ignores `store` and `erase`.
HELPER = (f'!f() {{ if [ "$1" = get ]; then printf "username=%s\\npassword=%s\\n" '
          f'"${HELPER_USERNAME}" "${HELPER_PASSWORD}"; fi; }}; f')
# user:password@ (or token@) right after a scheme, anywhere in a text: up to the last
# "@" before a space, a quote, "?" or "#", so that a password holding an unencoded "/"
# (as base64 tokens do) is hidden whole, not cut at its "/".
USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^\s'\"?#@]+)@"
                      r"(?:[^\s'\"?#@]*@)*")


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)  # never in a repr, so never in a log by accident


def ambiguous_userinfo(url: str) -> bool:
    """Whether ``url`` has an "@" after a "/" of its authority part: a user or password
    holding an unencoded "/" (``https://bob:S3KR1T/tok@host/r.git``), which a URL parser
    reads as host ``bob`` and a path holding the secret."""
    _, sep, rest = url.partition("://")
    if not sep:
        return False
    head = re.split(r"[?#]", rest, maxsplit=1)[0]
    return "@" in head and "/" in head[:head.rindex("@")]


# A URL's query in a text: after "?" up to a space, a quote or "#". Its values are
# hidden whole (``?access_token=***&ref=***``): a token travels there as often as in
# the user part, and no value of a repository URL's query is needed to tell it apart.
QUERY = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"?#]*)\?(?P<query>[^\s'\"#]*)")


def _hidden_query(query: str) -> str:
    return "&".join(f"{pair.partition('=')[0]}={HIDDEN}" if "=" in pair else HIDDEN
                    for pair in query.split("&"))


def query_values(url: str) -> list[str]:
    """The values of ``url``'s query, as written and decoded: secrets to scrub from
    whatever git prints, since git is given the URL with its query."""
    try:
        query = urlsplit(url).query
    except ValueError:
        query = url.partition("?")[2].partition("#")[0]
    values = [pair.partition("=")[2] or pair for pair in query.split("&") if pair]
    return [v for value in values for v in {value, unquote(value)} if len(v) >= 4]


def redact(url: str) -> str:
    """``url`` fit to show: any ``user:password@`` (or token ``@``) becomes ``***@``,
    and each value of its query ``***``.

    An ssh user name without a password (``ssh://git@host/x``) is not a secret
    and is kept; scp-like ``git@host:path`` has no scheme and is left alone.
    """
    return _redact_query(_redact_userinfo(url))


def _redact_query(text: str) -> str:
    return QUERY.sub(lambda m: f"{m['head']}?{_hidden_query(m['query'])}"
                     if m["query"] else m[0], text)


def _redact_userinfo(url: str) -> str:
    if ambiguous_userinfo(url):
        scheme, _, rest = url.partition("://")
        head, tail = cast(re.Match[str], re.match(r"([^?#]*)(.*)", rest, re.DOTALL)).groups()
        return f"{scheme}://{HIDDEN}@{head.rsplit('@', 1)[1]}{tail}"
    try:
        parts = urlsplit(url)
    except ValueError:  # a malformed URL ("Invalid IPv6 URL"): hide all before its last '@'
        scheme, sep, rest = url.partition("://")
        return f"{scheme}{sep}{HIDDEN}@{rest.rsplit('@', 1)[1]}" if "@" in rest else url
    if not parts.scheme or "@" not in parts.netloc:
        return url
    userinfo, host = parts.netloc.rsplit("@", 1)
    if parts.scheme == "ssh" and ":" not in userinfo:
        return url
    return urlunsplit(parts._replace(netloc=f"{HIDDEN}@{host}"))


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` (e.g. git's stderr) with URL credentials and known secret values hidden."""
    text = _redact_query(USERINFO.sub(lambda m: f"{m['scheme']}{HIDDEN}@", text))
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text


def split_url(url: str) -> tuple[str, str | None, str | None]:
    """The URL without its ``user:password@`` (what git is given), the user and the password.

    Only http(s) and file URLs lose their user part: ``ssh://git@host`` keeps
    its user, which ssh needs and which is no secret.
    """
    parts = urlsplit(url)
    if "@" not in parts.netloc or parts.scheme not in {"http", "https", "file"}:
        return url, None, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    username, colon, password = userinfo.partition(":")
    # A URL's user part is percent-encoded (RFC 3986): "p%40ss%2Fword" is the password
    # "p@ss/word", which is what the helper must hand git.
    return (urlunsplit(parts._replace(netloc=host)), unquote(username) or None,
            unquote(password) if colon else None)


def resolve(url: str, environ: Mapping[str, str] | None = None) -> tuple[str, Credentials | None]:
    """The URL to give git and the credentials to hand it (URL first, then the environment)."""
    if ambiguous_userinfo(url):
        from omegitops.util.errors import InputError

        raise InputError(
            f"the repository URL {redact(url)} has an '@' after a '/' of its host part: a "
            "user name or password holding '/' must be percent-encoded ('%2F'), or given "
            "as GIT_USERNAME and GIT_TOKEN; nothing was cloned")
    try:
        clean, username, password = split_url(url)
    except ValueError as err:
        from omegitops.util.errors import InputError

        raise InputError(f"the repository URL {redact(url)} is not a valid URL ({err}); "
                         "nothing was cloned") from None
    if password:
        return clean, Credentials(username or DEFAULT_USERNAME, password)
    found = from_environment(environ)
    if username and found:
        return clean, Credentials(username, found.password)
    if username:
        # https://TOKEN@host: GitHub's shape for a token with no user name.
        return clean, Credentials(DEFAULT_USERNAME, username)
    return clean, found


def from_environment(environ: Mapping[str, str] | None = None) -> Credentials | None:
    """Credentials from ``GIT_USERNAME``/``GIT_TOKEN`` or ``GIT_TOKEN_FILE``; None when unset."""
    env = os.environ if environ is None else environ
    token = env.get("GIT_TOKEN", "").strip()
    username = env.get("GIT_USERNAME", "").strip()
    token_file = env.get("GIT_TOKEN_FILE", "").strip()
    if not token and token_file:
        path = Path(token_file)
        token = _read_secret(path, "GIT_TOKEN_FILE")
        if not token:
            from omegitops.util.errors import InputError

            # A mounted Secret whose key is empty: named, not taken for "no credentials".
            raise InputError(f"GIT_TOKEN_FILE {token_file} is empty; nothing was cloned")
        beside = path.with_name("username")
        if not username and beside.is_file():
            username = _read_secret(beside, "the username file")
    if not token:
        return None
    return Credentials(username or DEFAULT_USERNAME, token)


def _read_secret(path: Path, what: str) -> str:
    from omegitops.util.errors import InputError

    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as err:
        # The path is not a secret; its content is, and is never shown.
        raise InputError(f"cannot read {what} {path}: {err.strerror}") from err


def git_environment(url: str, credentials: Credentials | None,
                    environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for every git command of a run against ``url`` (already without secrets).

    Git never prompts and never opens an editor (a missing credential fails
    the run instead of hanging it; a rebase keeps the report commit's message). With credentials, a helper scoped to the URL's scheme and host hands
    them over; an empty helper first resets any helper configured before
    (the image's, a developer's keychain) for that host only.
    """
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true"}
    parts = urlsplit(url)
    if credentials is None or parts.scheme not in {"http", "https"}:
        # ssh authenticates with keys (GIT_SSH_COMMAND); file:// needs nothing.
        return env
    scope = f"{parts.scheme}://{parts.netloc}"
    current = os.environ if environ is None else environ
    # Append to any GIT_CONFIG_* the caller already uses rather than replace it.
    count = current.get("GIT_CONFIG_COUNT", "").strip() or "0"
    if not count.isdigit():
        from omegitops.util.errors import InputError

        # git itself refuses every command with it ("bogus count in GIT_CONFIG_COUNT").
        raise InputError(f"GIT_CONFIG_COUNT={count[:40]!r} in the environment is not a count "
                       "of settings; git refuses to run with it; nothing was cloned")
    start = int(count)
    for offset, value in enumerate(("", HELPER)):
        env[f"GIT_CONFIG_KEY_{start + offset}"] = f"credential.{scope}.helper"
        env[f"GIT_CONFIG_VALUE_{start + offset}"] = value
    env["GIT_CONFIG_COUNT"] = str(start + 2)
    env[HELPER_USERNAME] = credentials.username
    env[HELPER_PASSWORD] = credentials.password
    return env
