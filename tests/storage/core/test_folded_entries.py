"""Folded-writes entries: their encoding, their plainness test, and applying them
with or without answers (followers and replays build no responses) leaves the
same state, entry by entry, as applying each request with its answer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cairn.common.keyorder import KeyOrder
from cairn.proto import oxia_client_pb2 as pb
from cairn.storage.core.apply import PendingChanges
from cairn.storage.core.entries import FOLDED_WRITES, Folded, decode_entry, encode_folded_writes
from cairn.storage.core.entry_apply import ShardRules, apply_entry
from cairn.storage.core.fastpath import folds_only_plain_puts, has_plain_puts
from cairn.storage.core.meta import notification_key
from cairn.storage.kv import Column, MemoryKv
from support.write_strategies import plain_puts

RULES = ShardRules(0, KeyOrder.HIERARCHICAL, True, 3_600_000, 1000)
keys = st.sampled_from(["/a", "/a/b", "/c", "/d/e/f", "/g"])
plain_put = plain_puts(keys, max_expected=6)
plain_request = st.builds(
    lambda puts, deletes: pb.WriteRequest(
        shard=0, puts=puts, deletes=[pb.DeleteRequest(key=key) for key in deletes]
    ),
    st.lists(plain_put, max_size=4),
    st.lists(keys, max_size=2),
)


@given(st.lists(plain_request, min_size=1, max_size=5))
def test_folded_payload_decodes_to_the_requests_sent(requests: list[pb.WriteRequest]) -> None:
    raws = [request.SerializeToString() for request in requests]
    payload = encode_folded_writes(raws)
    kind, body = decode_entry(payload)
    assert kind == FOLDED_WRITES
    assert isinstance(body, Folded)
    assert [request.SerializeToString() for request in body.requests] == raws
    assert folds_only_plain_puts(payload[1:]) == all(has_plain_puts(raw) for raw in raws)


def test_a_fold_holding_a_non_plain_put_is_not_plain() -> None:
    plain = pb.WriteRequest(shard=0, puts=[pb.PutRequest(key="/a", value=b"")])
    session_put = pb.WriteRequest(shard=0, puts=[pb.PutRequest(key="/b", value=b"", session_id=3)])
    payload = encode_folded_writes([plain.SerializeToString(), session_put.SerializeToString()])
    assert not folds_only_plain_puts(payload[1:])


def _state(kv: MemoryKv) -> dict[tuple[Column, bytes], bytes]:
    return {(column, key): value for column in Column for key, value in kv.scan(column, b"", None)}


@given(st.lists(st.lists(plain_request, min_size=1, max_size=3), min_size=1, max_size=6))
def test_answerless_apply_leaves_the_same_state(entries: list[list[pb.WriteRequest]]) -> None:
    answering, silent = MemoryKv(), MemoryKv()
    for offset, requests in enumerate(entries, start=1):
        body = Folded(requests)
        plain = all(has_plain_puts(request.SerializeToString()) for request in requests)
        for kv, answer in ((answering, True), (silent, False)):
            state = PendingChanges(kv)
            result = apply_entry(
                RULES, state, FOLDED_WRITES, body, offset, 1000 + offset, plain, answer
            )
            assert len(result) == len(requests)
            state.set_commit_offset(offset)
            kv.write(state.changes())
        assert _state(answering) == _state(silent)


@given(st.lists(plain_request, min_size=1, max_size=4))
def test_each_folded_request_gets_the_response_it_would_get_alone(
    requests: list[pb.WriteRequest],
) -> None:
    """Requests are applied in order within the fold: each one's answer equals
    what applying it as its own step (same offset) gives."""
    folded_kv, stepwise_kv = MemoryKv(), MemoryKv()
    plain = all(has_plain_puts(request.SerializeToString()) for request in requests)
    state = PendingChanges(folded_kv)
    answers = apply_entry(RULES, state, FOLDED_WRITES, Folded(requests), 7, 1234, plain)
    folded_kv.write(state.changes())
    for request, answer in zip(requests, answers, strict=True):
        alone = PendingChanges(stepwise_kv)
        expected = apply_entry(RULES, alone, FOLDED_WRITES, Folded([request]), 7, 1234, plain)
        stepwise_kv.write(alone.changes())
        assert pb.WriteResponse.FromString(answer) == pb.WriteResponse.FromString(expected[0])
    # Same records; the notification batch of the fold covers every key changed.
    records = {key: value for key, value in folded_kv.scan(Column.RECORDS, b"", None)}
    assert records == {key: value for key, value in stepwise_kv.scan(Column.RECORDS, b"", None)}
    changed = {
        put.key
        for request, answer in zip(requests, answers, strict=True)
        for put, outcome in zip(request.puts, pb.WriteResponse.FromString(answer).puts, strict=True)
        if outcome.status == pb.OK
    }
    batch = folded_kv.get(Column.META, notification_key(7))
    if changed:
        assert batch is not None
        assert changed <= set(pb.NotificationBatch.FromString(batch).notifications)
