"""The shared log formats: JSON lines an aggregator reads, and trace ids in both."""

from __future__ import annotations

import argparse
import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from cairn.common.logs import TEXT_FORMAT, add_log_arguments, setup_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    uvicorn = {
        name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers))
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
    }
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, (old_level, old_handlers) in uvicorn.items():
        logger = logging.getLogger(name)
        logger.setLevel(old_level)
        logger.handlers[:] = old_handlers


def _json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    lines = stream.getvalue().splitlines()
    return [json.loads(line) for line in lines]  # each line alone is valid JSON


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_carry_the_fields_an_aggregator_expects() -> None:
    stream = io.StringIO()
    setup_logging("cairn-storage", "INFO", "json", node="storage-0", stream=stream)
    logging.getLogger("cairn.storage.shard").info(
        "shard %d is leader\nof term %d", 3, 7, extra={"shard": 3, "term": 7}
    )
    logging.getLogger("cairn.storage").debug("below the level")
    [line] = _json_lines(stream)
    assert line["level"] == "INFO"
    assert line["logger"] == "cairn.storage.shard"
    assert line["message"] == "shard 3 is leader\nof term 7"
    assert line["component"] == "cairn-storage"
    assert line["node"] == "storage-0"
    assert line["shard"] == 3 and line["term"] == 7
    timestamp = str(line["timestamp"])
    assert timestamp.endswith("Z") and "T" in timestamp  # RFC 3339, UTC
    assert "trace_id" not in line and "exception" not in line


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_carry_the_exception_text() -> None:
    stream = io.StringIO()
    setup_logging("cairn-gateway", "INFO", "json", stream=stream)
    try:
        raise ValueError("broken\nacross lines")
    except ValueError:
        logging.getLogger("cairn.gateway").exception("request failed")
    [line] = _json_lines(stream)
    assert line["level"] == "ERROR"
    assert line["message"] == "request failed"
    assert "Traceback" in str(line["exception"])
    assert "ValueError: broken" in str(line["exception"])
    assert "node" not in line


@pytest.mark.usefixtures("restore_logging")
def test_a_line_written_in_a_span_names_its_trace_in_both_formats() -> None:
    tracer = TracerProvider().get_tracer("test")
    for log_format in ("json", "text"):
        stream = io.StringIO()
        setup_logging("cairn-storage", "INFO", log_format, stream=stream)
        with tracer.start_as_current_span("work") as span:
            logging.getLogger("cairn").warning("inside")
        logging.getLogger("cairn").warning("outside")
        context = span.get_span_context()
        trace_id, span_id = format(context.trace_id, "032x"), format(context.span_id, "016x")
        inside, outside = stream.getvalue().splitlines()
        if log_format == "json":
            assert json.loads(inside)["trace_id"] == trace_id
            assert json.loads(inside)["span_id"] == span_id
            assert "trace_id" not in json.loads(outside)
        else:
            assert inside.endswith(f"inside trace_id={trace_id} span_id={span_id}")
            assert outside.endswith("outside")


@pytest.mark.usefixtures("restore_logging")
def test_uvicorn_access_lines_go_through_the_formatter_with_their_parts() -> None:
    stream = io.StringIO()
    # The gateway's default level hides INFO; its access log shows anyway.
    setup_logging("cairn-gateway", "WARNING", "json", stream=stream, access_log=True)
    access = logging.getLogger("uvicorn.access")
    access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "PUT", "/v1/keys/a", "1.1", 201)
    logging.getLogger("uvicorn.error").info("hidden at WARNING")
    [line] = _json_lines(stream)
    assert line["logger"] == "uvicorn.access"
    assert line["message"] == '127.0.0.1:5000 - "PUT /v1/keys/a HTTP/1.1" 201'
    assert line["http.request.method"] == "PUT"
    assert line["url.path"] == "/v1/keys/a"
    assert line["http.response.status_code"] == 201


@pytest.mark.usefixtures("restore_logging")
def test_text_stays_the_default() -> None:
    parser = argparse.ArgumentParser()
    add_log_arguments(parser)
    assert parser.parse_args([]).log_format == "text"
    with pytest.raises(SystemExit):
        parser.parse_args(["--log-format", "xml"])
    stream = io.StringIO()
    setup_logging("cairn-health", "INFO", stream=stream)
    logging.getLogger("cairn.health").info("probing")
    assert stream.getvalue().rstrip().endswith(" INFO cairn.health: probing")
    assert TEXT_FORMAT.startswith("%(asctime)s")
