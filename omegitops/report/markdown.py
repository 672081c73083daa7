"""Values from manifests (and the cluster) made inert in GitHub Markdown; pure.

The plan comment and STATUS.md quote what the repository holds: file paths, images,
field values, messages quoting them. Quoted raw, such a value could ping a user
(``@octocat``), link an issue (``#1``), open or close the document's HTML folds
(``</details>``), add markup (``<img>``), or end an inline code span early (a run of
backticks). Every quoted value goes through one of these, registered as the templates'
filters (``register``):

- ``text`` (also ``cell``): plain text, in a paragraph, a list item or a table cell;
- ``code``: an inline code span, in any context but a table cell, where ``code_cell``;
- ``html`` and ``html_code``: inside an HTML line (a ``<summary>``), where Markdown is
  not read;
- ``anchor``: an HTML id or link fragment, only letters, digits, ``-``, ``_`` and ``.``.

``@`` and ``#`` are followed by a zero-width joiner outside code: GitHub links a mention
or an issue only when a word character follows them, and the joiner is invisible, so
the text reads (and copies) as it was written. Code spans and fenced blocks are never
linked by GitHub, so they need only their fences.
"""

from __future__ import annotations

import re
from typing import Any

import markupsafe
from jinja2 import Environment

ZWJ = "\u200d"
# Characters that mean something to Markdown inline (a backslash escapes any of them);
# with brackets escaped, no link or image can start, so parentheses and ``!`` mean
# nothing.
_SPECIALS = re.compile(r"([\\`*_\[\]|~])")
# What would start a list item or a heading underline at the start of a block.
_BLOCK_START = re.compile(r"^(\s*)(?:([-+=])|(\d+)\.)")
_MENTIONS = re.compile(r"([@#])")
_NEWLINES = re.compile(r"[\r\n]+")
_BACKTICKS = re.compile(r"`+")
_NOT_ANCHOR = re.compile(r"[^A-Za-z0-9_.-]")
# Any character ``text`` would change, in one search: most values quoted (names, images,
# health words) hold none, and a report of 10,000 services quotes 110,000 of them.
_NEEDS_ESCAPING = re.compile(r"[\\`*_\[\]|~&<>@#\r\n]")


def _one_line(value: Any) -> str:
    text = str(value)
    return _NEWLINES.sub(" ", text) if "\n" in text or "\r" in text else text


def _unlinked(text: str) -> str:
    return _MENTIONS.sub("\\1" + ZWJ, text)


def text(value: Any) -> str:
    """Plain text on one line: HTML's specials as entities, Markdown's escaped, ``@``
    and ``#`` unlinked; the same in a table cell (``|`` is escaped)."""
    plain = str(value)
    if not _NEEDS_ESCAPING.search(plain) and not _BLOCK_START.match(plain):
        return plain  # what the steps below would give back unchanged
    escaped = _one_line(plain).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    escaped = _SPECIALS.sub(r"\\\1", escaped)
    escaped = _BLOCK_START.sub(_block_start, escaped, count=1)
    return _unlinked(escaped)


def _block_start(found: re.Match[str]) -> str:
    """``-``, ``+``, ``=`` or ``1.`` escaped: never a list item or an underline."""
    if found.group(2):
        return f"{found.group(1)}\\{found.group(2)}"
    return f"{found.group(1)}{found.group(3)}\\."


def code(value: Any) -> str:
    """An inline code span holding ``value`` on one line, whatever backticks it holds:
    fenced with one more backtick than its longest run, padded with a space when it
    starts or ends with one."""
    content = _one_line(value)
    longest = max((len(run) for run in _BACKTICKS.findall(content)), default=0) \
        if "`" in content else 0
    fence = "`" * (longest + 1)
    pad = " " if content[:1] in ("`", " ") or content[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{content}{pad}{fence}"


def code_cell(value: Any) -> str:
    """``code`` in a table cell, where GitHub reads ``\\|`` as a pipe in the span."""
    return code(value).replace("|", "\\|")


def html(value: Any) -> str:
    """Text inside an HTML element: entities for HTML's specials, ``@`` and ``#``
    unlinked."""
    return str(markupsafe.escape(_unlinked(_one_line(value))))


def html_code(value: Any) -> str:
    """Inline code inside HTML (a ``<summary>`` line), where GitHub shows backticks as
    they are."""
    return f"<code>{markupsafe.escape(_one_line(value))}</code>"


def anchor(value: Any) -> str:
    """An id or fragment: only the characters that need no escaping anywhere."""
    return _NOT_ANCHOR.sub("", str(value)).lower()


def register(env: Environment) -> Environment:
    """Give ``env`` the filters above, by their names (``cell`` is ``text``)."""
    env.filters.update(text=text, cell=text, code=code, code_cell=code_cell, html=html,
                       html_code=html_code, anchor=anchor)
    return env
