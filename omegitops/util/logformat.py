"""How the run's log lines look: ``LEVEL message`` for a person at a terminal, or one
JSON object a line for a log pipeline (Loki, Cloud Logging, Elasticsearch), as Flux's
and Argo CD's controllers log."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

FORMATS = ("text", "json")
# Fields a log call may add with ``extra=``: what a pipeline filters a fleet's lines by.
FIELDS = ("namespace", "service", "component", "instance", "reason", "action")


class JsonLines(logging.Formatter):
    """One JSON object per record: time (UTC, milliseconds), level, logger, message,
    the fields above when the call gave them, and the exception when there was one."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, object] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def formatter(kind: str) -> logging.Formatter:
    if kind == "json":
        return JsonLines()
    return logging.Formatter("%(levelname)s %(message)s")
