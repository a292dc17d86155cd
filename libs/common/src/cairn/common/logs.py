"""Log output for every Cairn process: text (the default) or one JSON object a line.

    add_log_arguments(parser)            # --log-format text|json
    setup_logging("cairn-storage", args.log_level, args.log_format, node="pod-0")

One handler on the root logger, writing to stderr. Both formats add the active
span's trace and span ids (W3C hex) to a line written while a span is active, so a
log line can be found from a trace and back; the lookup is one contextvar read, done
by a filter on the handler (in the thread and context that logs).

The JSON fields are the ones log aggregators (Loki, Elasticsearch, Cloud Logging)
pick up without parsing rules: `timestamp` (RFC 3339, UTC, microseconds), `level`,
`logger`, `message`, `component`, `node` (when known), `exception` (the traceback
text), `trace_id`/`span_id`, and every `extra={...}` field a caller passes. uvicorn's
access lines also get their parts as fields (`http.request.method`, `url.path`,
`http.response.status_code`, `client.address`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import socket
import sys
from typing import Any, TextIO

from opentelemetry import trace

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")

# Attributes every LogRecord has: anything else on a record came from `extra=`.
_RECORD_ATTRIBUTES = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys()
    | {"message", "asctime", "trace_id", "span_id", "taskName"}
)
_ACCESS_FIELDS = ("client.address", "http.request.method", "url.path", "network.protocol.version")


class TraceContextFilter(logging.Filter):
    """Puts `trace_id` and `span_id` on a record written while a span is active."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        return True


class TextFormatter(logging.Formatter):
    """The usual text line, with ` trace_id=... span_id=...` when a span is active."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        trace_id = getattr(record, "trace_id", None)
        if trace_id is None:
            return line
        # After the first line: a traceback stays the last thing printed.
        first, newline, rest = line.partition("\n")
        span_id = getattr(record, "span_id", None)
        return f"{first} trace_id={trace_id} span_id={span_id}{newline}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in text are escaped)."""

    def __init__(self, component: str, node: str | None = None) -> None:
        super().__init__()
        self.component = component
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "timestamp": _rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "component": self.component,
        }
        if self.node:
            document["node"] = self.node
        trace_id = getattr(record, "trace_id", None)
        if trace_id is not None:
            document["trace_id"] = trace_id
            document["span_id"] = getattr(record, "span_id", None)
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            document["exception"] = record.exc_text
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        if record.name == "uvicorn.access":
            document.update(_access_fields(record))
        for name, value in record.__dict__.items():
            if name not in _RECORD_ATTRIBUTES and name not in document:
                document[name] = value
        return json.dumps(document, default=str, ensure_ascii=False)


def _rfc3339(created: float) -> str:
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _access_fields(record: logging.LogRecord) -> dict[str, Any]:
    """uvicorn logs `%s - "%s %s HTTP/%s" %d` with (client, method, path, version,
    status) as args; an aggregator wants those as fields, not a string to parse."""
    args = record.args
    if not isinstance(args, tuple) or len(args) != 5:
        return {}
    fields: dict[str, Any] = dict(zip(_ACCESS_FIELDS, args[:4], strict=True))
    fields["http.response.status_code"] = args[4]
    return fields


def node_name() -> str:
    """This process's pod (Kubernetes sets HOSTNAME to it; POD_NAME, from the
    downward API, wins) or host name."""
    return os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """The `--log-format` option every Cairn program takes (levels stay per program)."""
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text lines (default) or one JSON object per line, for log aggregators",
    )


def _lean_records() -> None:
    """Records skip what neither format prints (the logging module's documented
    optimisation switches): the caller's file and line (found by walking the
    stack), and the thread, process and task names. A gateway writes an access
    line per request: these were the costliest parts of its record."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    if hasattr(logging, "logAsyncioTasks"):  # Python 3.12+
        logging.logAsyncioTasks = False


def setup_logging(
    component: str,
    level: str | int,
    log_format: str = "text",
    *,
    node: str | None = None,
    stream: TextIO | None = None,
    text_format: str = TEXT_FORMAT,
    access_log: bool = False,
) -> logging.Handler:
    """Replace the root logger's handlers with one that writes `log_format` to
    `stream` (stderr). uvicorn's loggers (started with `log_config=None`) write
    through it too. `access_log`: show uvicorn's access log at INFO whatever the
    root level (the gateway: an operator expects a web server's access log by
    default; not the sidecar, whose access log would be the kubelet's probes)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"unknown log format {log_format!r}; expected one of {LOG_FORMATS}")
    _lean_records()
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(
        JsonFormatter(component, node) if log_format == "json" else TextFormatter(text_format)
    )
    handler.addFilter(TraceContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in UVICORN_LOGGERS:
        uvicorn_logger = logging.getLogger(name)
        for old in list(uvicorn_logger.handlers):
            uvicorn_logger.removeHandler(old)
        uvicorn_logger.propagate = True
        uvicorn_logger.setLevel(logging.NOTSET)
    if access_log:
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    return handler
