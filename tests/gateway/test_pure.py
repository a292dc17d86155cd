"""Unit tests of the gateway's pure parts: tokens and cursors, header parsing,
the problem mappings, the change feed's event ids, the OpenAPI document."""

from __future__ import annotations

import base64
import json
import re
import zlib
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.client.errors import (
    ClientClosed,
    ClientError,
    InvalidArgument,
    KeyNotFound,
    NamespaceNotFound,
    NotificationsTrimmed,
    OutcomeUnknown,
    RequestTimeout,
    SessionExpired,
    UnexpectedVersion,
)
from cairn.client.records import Notification, NotificationBatch, NotificationType
from cairn.common.auth.config import parse_auth_config
from cairn.common.keyorder import KeyOrder
from cairn.gateway.app import create_app
from cairn.gateway.cursors import Cursor, CursorError, ScanQuery, resolve_query
from cairn.gateway.feed import FeedOverflow, FeedState, batch_json
from cairn.gateway.headers import (
    ONE_TAG_OR_ANY_PATTERN,
    TAGS_OR_ANY_PATTERN,
    EntityTags,
    HeaderError,
    WriteCondition,
    etag,
    header_text,
    parse_entity_tags,
    prefers_json,
    text_from_header,
    write_precondition,
)
from cairn.gateway.models import ChangeBatch
from cairn.gateway.problems import (
    Code,
    problem_for_client_error,
    problem_for_controller,
    problem_for_http_status,
    status_of,
)
from cairn.gateway.settings import GatewaySettings
from cairn.gateway.tokens import (
    TOKEN_PATTERN,
    FeedPosition,
    SessionToken,
    TokenError,
    pack,
    unpack,
)

# -- tokens and cursors --------------------------------------------------------------

keys = st.text(max_size=40)


@given(
    namespace=st.text(min_size=1, max_size=20),
    ids=st.dictionaries(st.integers(0, 2**31), st.integers(0, 2**63 - 1), min_size=1, max_size=8),
    identity=st.none() | st.text(min_size=1, max_size=20),
)
def test_session_tokens_round_trip(
    namespace: str, ids: dict[int, int], identity: str | None
) -> None:
    token = SessionToken(namespace, ids, identity).encode()
    assert re.fullmatch(TOKEN_PATTERN, token)
    assert SessionToken.decode(token, namespace) == SessionToken(namespace, ids, identity)


@given(offsets=st.dictionaries(st.integers(0, 1000), st.integers(-1, 2**62), max_size=8))
def test_feed_positions_round_trip(offsets: dict[int, int]) -> None:
    token = FeedPosition("ns", offsets).encode()
    assert FeedPosition.decode(token, "ns").offsets == offsets


def test_tokens_are_bound_to_their_kind_and_namespace() -> None:
    session = SessionToken("a", {0: 1}).encode()
    feed = FeedPosition("a", {0: 1}).encode()
    with pytest.raises(TokenError, match="namespace 'a'"):
        SessionToken.decode(session, "b")
    with pytest.raises(TokenError):
        SessionToken.decode(feed, "a")
    with pytest.raises(TokenError):
        FeedPosition.decode(session, "a")
    with pytest.raises(CursorError):
        Cursor.decode(session)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "garbage!",
        "AAAA",
        base64.urlsafe_b64encode(b"not zlib").decode(),
        base64.urlsafe_b64encode(zlib.compress(b"[1, 2]")).decode(),
        base64.urlsafe_b64encode(zlib.compress(b'{"v": 2, "t": "session"}')).decode(),
        pack("session", {"ns": "a", "s": {"x": 1}}),
        pack("session", {"ns": "a", "s": {"01": 1}}),
        pack("session", {"ns": "a", "s": {"1": -1}}),
        pack("session", {"ns": "a", "s": {"1": True}}),
        pack("session", {"ns": "a", "s": {}}),
        pack("session", {"ns": 1, "s": {"1": 1}}),
        "A" * 200_000,
    ],
)
def test_malformed_session_tokens_are_refused(token: str) -> None:
    with pytest.raises(TokenError):
        SessionToken.decode(token, "a")


def test_a_compression_bomb_is_refused() -> None:
    bomb = base64.urlsafe_b64encode(zlib.compress(b'{"v":1,"t":"feed","o":{},"x":"' + b"a" * 10**7))
    with pytest.raises(TokenError):
        unpack("feed", bomb.decode().rstrip("="))


@given(
    query=st.builds(
        ScanQuery,
        namespace=st.text(min_size=1, max_size=10),
        kind=st.sampled_from(["keys", "records"]),
        start=keys,
        end=keys,
        partition_key=st.none() | keys,
        index=st.none(),
    ),
    last=keys,
)
def test_cursors_round_trip(query: ScanQuery, last: str) -> None:
    cursor = Cursor(query, last)
    assert Cursor.decode(cursor.encode()) == cursor
    assert cursor.resume_start() == last + "\x00"


@settings(max_examples=300)
@given(a=keys, b=keys, order=st.sampled_from(list(KeyOrder)))
def test_the_resume_point_is_the_immediate_successor(a: str, b: str, order: KeyOrder) -> None:
    """Nothing lies strictly between a key and key + NUL in either key order, so a
    scan resumed there skips nothing and repeats nothing."""
    successor = a + "\x00"
    assert order.compare(a, successor) < 0
    assert not (order.compare(a, b) < 0 and order.compare(b, successor) < 0)


def test_index_cursors_skip_what_was_returned() -> None:
    query = ScanQuery("ns", "records", "a", "z", index="color")
    cursor = Cursor(query, "/k/2", "red")
    assert cursor.resume_start() == "red"
    order = KeyOrder.HIERARCHICAL
    assert cursor.already_returned("/k/1", "red", order)
    assert cursor.already_returned("/k/2", "red", order)
    assert not cursor.already_returned("/k/3", "red", order)
    assert not cursor.already_returned("/k/1", "reds", order)
    with pytest.raises(CursorError):
        Cursor(query, "/k/2")
    with pytest.raises(CursorError):
        Cursor(ScanQuery("ns", "keys", "a", "z"), "/k", "red")


def test_a_page_request_resolves_to_its_cursors_query() -> None:
    query = ScanQuery("ns", "keys", "a", "z", "p", None)
    cursor = Cursor(query, "m")
    assert resolve_query(cursor, "ns", "keys", None, "z", None, None) == query
    assert resolve_query(cursor, "ns", "keys", "a", "z", "p", None) == query
    for changed in (
        ("other", "keys", None, "z", None, None),
        ("ns", "records", None, "z", None, None),
        ("ns", "keys", "b", "z", None, None),
        ("ns", "keys", None, "y", None, None),
        ("ns", "keys", None, "z", "q", None),
        ("ns", "keys", None, "z", None, "idx"),
    ):
        with pytest.raises(CursorError, match="another query"):
            resolve_query(cursor, *changed)  # type: ignore[arg-type]
    assert resolve_query(None, "ns", "keys", None, "z", None, None) == ScanQuery(
        "ns", "keys", "", "z"
    )
    with pytest.raises(CursorError, match="end is required"):
        resolve_query(None, "ns", "keys", "a", None, None, None)


# -- headers ----------------------------------------------------------------------------


def test_entity_tags() -> None:
    assert etag(42) == '"42"'
    assert parse_entity_tags("*") == EntityTags(any=True)
    assert parse_entity_tags(' "1" , "22" ') == EntityTags(any=False, versions=(1, 22))
    assert parse_entity_tags('"7"').matches(7)
    assert not parse_entity_tags('"7"').matches(8)
    assert not parse_entity_tags("*").matches(None)
    for bad in ("", "1", 'W/"1"', '"a"', '"1', '""', ",", '"' + "9" * 19 + '"'):
        with pytest.raises(HeaderError):
            parse_entity_tags(bad)
    with pytest.raises(HeaderError, match="more than"):
        parse_entity_tags(", ".join(['"1"'] * 33))


def test_header_patterns_accept_what_the_parser_accepts() -> None:
    for value in ("*", '"1"', '"123456789012345678"'):
        assert re.search(ONE_TAG_OR_ANY_PATTERN, value)
        parse_entity_tags(value)
    for value in ('"1", "2"', '"1","2"'):
        assert re.search(TAGS_OR_ANY_PATTERN, value)
        assert not re.search(ONE_TAG_OR_ANY_PATTERN, value)
        parse_entity_tags(value)
    for value in ("1", 'W/"1"', '"1234567890123456789"', "**", '"1";'):
        assert not re.search(TAGS_OR_ANY_PATTERN, value)


def test_write_preconditions() -> None:
    assert write_precondition(None, None).condition is WriteCondition.NONE
    assert write_precondition('"5"', None).version_id == 5
    assert write_precondition("*", None).condition is WriteCondition.EXISTS
    assert write_precondition(None, "*").condition is WriteCondition.ABSENT
    assert write_precondition('"5"', "*").condition is WriteCondition.NEVER
    assert write_precondition("*", "*").condition is WriteCondition.NEVER
    with pytest.raises(HeaderError):
        write_precondition(None, '"5"')
    with pytest.raises(HeaderError):
        write_precondition('"5", "6"', None)
    with pytest.raises(HeaderError):
        write_precondition("x", "*")


@pytest.mark.parametrize(
    ("accept", "json"),
    [
        (None, False),
        ("", False),
        ("*/*", False),
        ("application/octet-stream", False),
        ("application/json", True),
        ("Application/JSON", True),
        ("application/json, */*;q=0.8", True),
        ("application/json, */*", True),
        ("application/json;q=0.5, */*", False),
        ("application/json;q=0", False),
        ("application/json;q=0.9, application/octet-stream", False),
        ("application/octet-stream;q=0.1, application/json", True),
        ("application/json;q=bad", False),
        ("text/html", False),
    ],
)
def test_accept_negotiation(accept: str | None, json: bool) -> None:
    assert prefers_json(accept) is json


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"])))
def test_header_text_round_trips(text: str) -> None:
    encoded = header_text(text)
    assert encoded.isascii() and "\n" not in encoded and "\r" not in encoded
    assert text_from_header(encoded) == text


# -- problems -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status", "code", "retry"),
    [
        (KeyNotFound("k"), 404, "key-not-found", False),
        (UnexpectedVersion("v"), 412, "version-mismatch", False),
        (SessionExpired("s"), 404, "session-expired", False),
        (InvalidArgument("i"), 400, "invalid-argument", False),
        (NamespaceNotFound("n"), 404, "namespace-not-found", False),
        (NotificationsTrimmed("t"), 410, "notifications-trimmed", False),
        (OutcomeUnknown("o"), 503, "outcome-unknown", False),
        (RequestTimeout("r"), 503, "unavailable", True),
        (ClientClosed("c"), 503, "unavailable", True),
        (ClientError("future"), 503, "unavailable", False),
    ],
)
def test_client_errors_map_to_problems(
    error: ClientError, status: int, code: str, retry: bool
) -> None:
    problem = problem_for_client_error(error, retry_after_s=3)
    document = problem.document()
    assert document == {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": str(error),
        "code": code,
    }
    assert ("Retry-After" in problem.headers) is retry
    if retry:
        assert problem.headers["Retry-After"] == "3"


def test_every_code_has_a_status_and_title() -> None:
    for code in Code:
        assert 400 <= status_of(code) < 600
    assert len({code.value for code in Code}) == len(Code)


def test_http_errors_map_to_problems() -> None:
    assert problem_for_http_status(404, "Not Found").code is Code.NOT_FOUND
    not_allowed = problem_for_http_status(405, "Method Not Allowed", {"Allow": "GET"})
    assert not_allowed.code is Code.METHOD_NOT_ALLOWED
    assert not_allowed.headers == {"Allow": "GET"} and "GET" in not_allowed.detail
    assert problem_for_http_status(413, "Content Too Large").code is Code.PAYLOAD_TOO_LARGE
    assert problem_for_http_status(418, None).code is Code.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (404, {"code": "namespace-not-found", "detail": "x"}, Code.NAMESPACE_NOT_FOUND),
        (404, {"code": "shard-not-found", "detail": "x"}, Code.SHARD_NOT_FOUND),
        (404, {"code": "node-not-found", "detail": "x"}, Code.NODE_NOT_FOUND),
        (404, {"detail": "Not Found"}, Code.NOT_FOUND),
        (409, {"code": "conflict", "detail": "x"}, Code.CONFLICT),
        (422, {"code": "invalid-change", "detail": "x"}, Code.INVALID_CHANGE),
        (400, {"code": "invalid-argument", "detail": "x"}, Code.INVALID_ARGUMENT),
        (415, {"code": "unsupported-media-type", "detail": "x"}, Code.UNSUPPORTED_MEDIA_TYPE),
        # A code passed on only with its own status; the controller's "unavailable"
        # is the gateway's "controller-unavailable".
        (404, {"code": "key-not-found", "detail": "x"}, Code.NOT_FOUND),
        (503, {"code": "unavailable", "detail": "x"}, Code.CONTROLLER_UNAVAILABLE),
        (422, {"detail": [{"loc": ["body", "replicas"], "msg": "too big"}]}, Code.INVALID_CHANGE),
        (503, {"title": "Not leading", "detail": "x"}, Code.CONTROLLER_UNAVAILABLE),
        (400, None, Code.INVALID_ARGUMENT),
        (500, "oops", Code.CONTROLLER_ERROR),
    ],
)
def test_controller_errors_map_to_problems(status: int, body: Any, code: Code) -> None:
    problem = problem_for_controller(status, body)
    assert problem.code is code
    assert problem.detail.startswith("controller: ")
    if isinstance(body, dict) and isinstance(body.get("detail"), list):
        assert "body.replicas: too big" in problem.detail


# -- the change feed's ids -------------------------------------------------------------


def batch(shard: int, offset: int, *keys: str) -> NotificationBatch:
    changes = tuple(Notification(k, NotificationType.CREATED, offset) for k in keys)
    return NotificationBatch(shard, offset, 1000 + offset, changes)


def test_events_wait_until_every_shard_reported() -> None:
    state = FeedState("ns", [0, 1], {}, max_pending_batches=10)
    assert state.push(batch(0, 5)) == []
    assert state.push(batch(0, 6, "a")) == []
    events = state.push(batch(1, 9))
    assert [e.batch.offset for e in events] == [5, 6, 9]
    positions = [FeedPosition.decode(e.id, "ns").offsets for e in events]
    # Shard 1's first batch is empty: its own offset is where its feed starts.
    assert positions == [{0: 5, 1: 9}, {0: 6, 1: 9}, {0: 6, 1: 9}]
    later = state.push(batch(1, 10, "b"))
    assert FeedPosition.decode(later[0].id, "ns").offsets == {0: 6, 1: 10}


def test_a_first_batch_with_changes_is_not_skipped_on_resume() -> None:
    state = FeedState("ns", [0, 1], {}, max_pending_batches=10)
    state.push(batch(0, 5, "a"))
    events = state.push(batch(1, 9, "b"))
    first = FeedPosition.decode(events[0].id, "ns").offsets
    # Shard 1's batch at 9 was not delivered before the first event: resuming
    # from the first event's id must replay it (after 8), not skip it.
    assert first == {0: 5, 1: 8}


def test_resumed_feeds_send_at_once_and_ignore_unknown_shards() -> None:
    state = FeedState("ns", [0, 1], {0: 3, 1: 4, 7: 1}, max_pending_batches=10)
    assert state.complete
    events = state.push(batch(1, 5, "x"))
    assert FeedPosition.decode(events[0].id, "ns").offsets == {0: 3, 1: 5}
    assert state.push(batch(9, 1, "y")) == []


def test_held_back_batches_are_bounded() -> None:
    state = FeedState("ns", [0, 1], {}, max_pending_batches=3)
    for offset in range(3):
        state.push(batch(0, offset))
    with pytest.raises(FeedOverflow):
        state.push(batch(0, 3))


def test_event_data_matches_the_documented_model() -> None:
    notes = (
        Notification("/a", NotificationType.CREATED, 4),
        Notification("/b", NotificationType.MODIFIED, 5),
        Notification("/c", NotificationType.DELETED),
        Notification("/d", NotificationType.RANGE_DELETED, key_range_last="/e"),
    )
    data = json.loads(batch_json(NotificationBatch(2, 7, 99, notes)))
    assert ChangeBatch.model_validate(data).model_dump(exclude_none=True) == data
    assert [c["type"] for c in data["changes"]] == [
        "created",
        "modified",
        "deleted",
        "rangeDeleted",
    ]
    assert data["changes"][3]["keyRangeEnd"] == "/e"


# -- the OpenAPI document ------------------------------------------------------------------


def document(**overrides: Any) -> dict[str, Any]:
    app = create_app(GatewaySettings(storage_addresses=("127.0.0.1:1",), **overrides))
    return app.openapi()


def test_every_error_is_a_documented_problem() -> None:
    paths = document()["paths"]
    for path, item in paths.items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert "422" not in responses, (method, path)
            if operation.get("parameters") or operation.get("requestBody"):
                assert "400" in responses, (method, path)
            if operation.get("requestBody"):
                assert "413" in responses, (method, path)
            for status, response in responses.items():
                if int(status) >= 400:
                    schema = response["content"]["application/problem+json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ProblemDocument"}
                    assert response["description"], (method, path, status)
    schemas = document()["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ProblemDocument" in schemas
    assert "ChangeBatch" in schemas


def test_optional_parameters_are_plain_strings() -> None:
    """No `anyOf: [string, null]`: an absent parameter is HTTP's none."""
    for item in document()["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                assert {"type": "null"} not in parameter["schema"].get("anyOf", [])


def test_the_document_declares_bearer_auth_only_when_required() -> None:
    assert "securitySchemes" not in document()["components"]
    secured = document(token="t")
    assert secured["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, item in secured["paths"].items():
        for operation in item.values():
            if path in ("/livez", "/readyz"):
                assert "security" not in operation
            else:
                assert operation["security"] == [{"bearer": []}]
                assert "401" in operation["responses"]


def test_settings_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="storage address"):
        GatewaySettings(storage_addresses=())
    with pytest.raises(ValueError, match="empty bearer token"):
        GatewaySettings(storage_addresses=("a:1",), token="")
    with pytest.raises(ValueError, match="default_page_limit"):
        GatewaySettings(storage_addresses=("a:1",), default_page_limit=2000)
    # The single --token-file gate predates per-caller auth: one or the other.
    enabled = parse_auth_config({"enabled": True}, Path("."))
    with pytest.raises(ValueError, match="exclude each other"):
        GatewaySettings(storage_addresses=("a:1",), token="t", auth=enabled, session_key=b"k")
    with pytest.raises(ValueError, match="session key"):
        GatewaySettings(storage_addresses=("a:1",), auth=enabled)
