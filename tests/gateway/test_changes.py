"""The change feed over real HTTP: Server-Sent Events, resumed with
Last-Event-ID (or ?since=) on the other gateway without losing or repeating a
change."""

from __future__ import annotations

import time

import httpx
import pytest

from gateway.helpers import SseEvent, SseStream, problem, sse

pytestmark = pytest.mark.e2e

CHANGES = "/v1/namespaces/default/changes"


def changed_keys(events: list[SseEvent], prefix: str) -> list[str]:
    return [
        change["key"]
        for event in events
        for change in event.json()["changes"]
        if change["key"].startswith(prefix)
    ]


def read_until_keys(stream: SseStream, prefix: str, wanted: set[str]) -> list[SseEvent]:
    seen: set[str] = set()

    def done(event: SseEvent) -> bool:
        seen.update(changed_keys([event], prefix))
        return wanted <= seen

    return stream.events_until(done)


def initial_events(stream: SseStream, shards: int) -> list[SseEvent]:
    reported: set[int] = set()

    def done(event: SseEvent) -> bool:
        reported.add(event.json()["shard"])
        return len(reported) == shards

    return stream.events_until(done)


def test_events_resume_on_the_other_gateway_without_loss_or_repeat(
    g1: httpx.Client, g2: httpx.Client, prefix: str
) -> None:
    first_keys = [f"{prefix}k{i:02d}" for i in range(10)]
    with g1.stream("GET", CHANGES) as response:
        assert response.status_code == 200
        assert response.headers["cache-control"] == "no-cache"
        stream = sse(response)
        start = initial_events(stream, shards=3)
        assert stream.retry_ms == 1000
        assert all(event.json()["changes"] == [] and event.id for event in start)
        for i, key in enumerate(first_keys):
            (g1, g2)[i % 2].put(f"/v1/namespaces/default/keys/{key}", content=b"v")
        events = read_until_keys(stream, prefix, set(first_keys))
    seen = changed_keys(events, prefix)
    assert sorted(seen) == first_keys and len(seen) == len(set(seen))
    for event in events:
        document = event.json()
        assert set(document) == {"shard", "offset", "timestampMs", "changes"}
        for change in document["changes"]:
            if change["key"].startswith(prefix):
                assert change["type"] == "created" and change["versionId"] > 0
    # Resume from the middle: the events after it, and the changes made while
    # no one was listening, each once.
    middle = len(events) // 2
    delivered = set(changed_keys(events[: middle + 1], prefix))
    later_keys = [f"{prefix}later{i}" for i in range(5)]
    for key in later_keys:
        g1.put(f"/v1/namespaces/default/keys/{key}", content=b"v")
    expected = (set(first_keys) - delivered) | set(later_keys)
    with g2.stream("GET", CHANGES, headers={"Last-Event-ID": events[middle].id or ""}) as response:
        assert response.status_code == 200
        resumed = read_until_keys(sse(response), prefix, expected)
    again = changed_keys(resumed, prefix)
    assert sorted(again) == sorted(expected), (delivered, again)
    # ?since= does the same (and the header would win over it).
    with g1.stream("GET", CHANGES, params={"since": events[middle].id}) as response:
        assert sorted(
            changed_keys(read_until_keys(sse(response), prefix, expected), prefix)
        ) == sorted(expected)


def test_change_types(g1: httpx.Client, prefix: str) -> None:
    with g1.stream("GET", CHANGES) as response:
        stream = sse(response)
        initial_events(stream, shards=3)
        key = f"{prefix}typed"
        g1.put(f"/v1/namespaces/default/keys/{key}", content=b"1")
        g1.put(f"/v1/namespaces/default/keys/{key}", content=b"2")
        g1.delete(f"/v1/namespaces/default/keys/{key}")
        g1.delete(
            "/v1/namespaces/default/keys", params={"start": f"{prefix}r/", "end": f"{prefix}r//"}
        )
        kinds: list[tuple[str, str]] = []

        def done(event: SseEvent) -> bool:
            for change in event.json()["changes"]:
                if change["key"].startswith(prefix):
                    kinds.append((change["type"], change.get("keyRangeEnd", "")))
            return len(kinds) >= 4

        stream.events_until(done)
    assert kinds[:3] == [("created", ""), ("modified", ""), ("deleted", "")]
    assert kinds[3] == ("rangeDeleted", f"{prefix}r//")


def test_keepalives_and_stream_bounds(g1: httpx.Client) -> None:
    with g1.stream("GET", CHANGES) as response:
        stream = sse(response)
        initial_events(stream, shards=3)
        started = time.monotonic()
        # Idle: comment lines only (the fixture's interval is 0.5 s).
        for line in stream.lines:
            if line.startswith(":"):
                break
        assert time.monotonic() - started < 5
    # max_events ends the stream after that many events.
    with g1.stream("GET", CHANGES, params={"max_events": 2}) as response:
        stream = sse(response)
        assert len([stream.next_event(), stream.next_event()]) == 2
        with pytest.raises(EOFError):
            stream.next_event()
    # max_duration_ms ends it after that long, events or not.
    started = time.monotonic()
    with g1.stream("GET", CHANGES, params={"max_duration_ms": 700}) as response:
        sse(response).rest()
    assert 0.5 < time.monotonic() - started < 10


def test_feed_errors(g1: httpx.Client) -> None:
    problem(g1.get(CHANGES, headers={"Last-Event-ID": "nonsense"}), 400, "invalid-argument")
    problem(g1.get(CHANGES, params={"since": "nonsense"}), 400, "invalid-argument")
    with g1.stream("GET", CHANGES, params={"max_events": 1}) as response:
        event_id = sse(response).next_event().id
    assert event_id
    # An id is bound to its namespace.
    problem(
        g1.get("/v1/namespaces/natural/changes", headers={"Last-Event-ID": event_id}),
        400,
        "invalid-argument",
    )
    problem(g1.get("/v1/namespaces/nope/changes"), 404, "namespace-not-found")
    # A namespace with notifications switched off.
    problem(g1.get("/v1/namespaces/quiet/changes"), 400, "invalid-argument")
    for params in ({"max_events": 0}, {"max_duration_ms": -1}):
        problem(g1.get(CHANGES, params=params), 400, "invalid-argument")


def test_a_prefix_filtered_feed_carries_only_matching_changes_and_resumes(
    g1: httpx.Client, g2: httpx.Client, prefix: str
) -> None:
    watched = f"{prefix}in/"
    params = {"prefix": watched}
    inside = [f"{watched}{i}" for i in range(6)]
    with g1.stream("GET", CHANGES, params=params) as response:
        assert response.status_code == 200
        stream = sse(response)
        initial_events(stream, shards=3)
        for i, key in enumerate(inside):
            g1.put(f"/v1/namespaces/default/keys/{key}", content=b"v")
            g1.put(f"/v1/namespaces/default/keys/{prefix}out/{i}", content=b"v")
        events = read_until_keys(stream, prefix, set(inside))
        # Only changes outside the prefix now: the feed still moves on, by events
        # without changes that carry the position past them.
        for i in range(3):
            g1.put(f"/v1/namespaces/default/keys/{prefix}out/later{i}", content=b"v")
        passed = stream.events_until(lambda event: event.json()["changes"] == [])
    every_key = [c["key"] for e in events + passed for c in e.json()["changes"]]
    assert sorted(every_key) == inside
    # Resumed on the other gateway after the last event, with the same filter:
    # only what came later and matches, once.
    later = [f"{watched}later{i}" for i in range(3)]
    for key in later:
        g1.put(f"/v1/namespaces/default/keys/{key}", content=b"v")
        g1.put(f"/v1/namespaces/default/keys/{prefix}out/{key[-6:]}", content=b"v")
    resume = {"Last-Event-ID": passed[-1].id or ""}
    with g2.stream("GET", CHANGES, params=params, headers=resume) as response:
        resumed = read_until_keys(sse(response), prefix, set(later))
    assert sorted(c["key"] for e in resumed for c in e.json()["changes"]) == later
    # Without versions on request.
    with g1.stream(
        "GET", CHANGES, params={**params, "versions": "false"}, headers=resume
    ) as response:
        bare = read_until_keys(sse(response), prefix, set(later))
    changes = [c for e in bare for c in e.json()["changes"]]
    assert changes and all("versionId" not in c for c in changes)


def test_too_many_prefixes_are_a_clear_error(g1: httpx.Client) -> None:
    params = [("prefix", f"/p{i}") for i in range(65)]
    response = g1.get(CHANGES, params=params)
    assert response.status_code == 400
    assert "at most 64 key prefixes" in response.json()["detail"]
