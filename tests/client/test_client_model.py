"""The client API against a dict model (Hypothesis stateful testing), on a real
3-shard standalone server: puts (plain, create-only, conditional), deletes
(plain, conditional), range deletes, gets with every comparison, lists and range
scans across shards. Every answer, versions included, must be the model's."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from cairn.client import errors
from cairn.client.records import EXPECTED_RECORD_DOES_NOT_EXIST, Comparison
from cairn.client.sync import Client
from cairn.common.keyorder import KeyOrder

_runs = itertools.count()
ORDER = KeyOrder.HIERARCHICAL
suffixes = st.sampled_from(["a", "b", "a/b", "a/c", "b/a", "c", "a/b/c"])
values = st.binary(max_size=8)


@dataclass
class Stored:
    value: bytes
    version_id: int
    modifications: int


def ordered(keys: list[str]) -> list[str]:
    return sorted(keys, key=functools.cmp_to_key(ORDER.compare))


class ClientAgainstDict(RuleBasedStateMachine):
    server: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.client = Client(self.server)
        self.prefix = f"/model-{next(_runs)}/"
        self.model: dict[str, Stored] = {}

    def teardown(self) -> None:
        self.client.close()

    @initialize()
    def start_empty(self) -> None:
        assert self.client.list(self.prefix, self.prefix + "~") == []

    def key(self, suffix: str) -> str:
        return self.prefix + suffix

    @rule(suffix=suffixes, value=values)
    def put(self, suffix: str, value: bytes) -> None:
        key = self.key(suffix)
        result = self.client.put(key, value)
        before = self.model.get(key)
        assert result.version.modifications_count == (before.modifications + 1 if before else 0)
        self.model[key] = Stored(
            value, result.version.version_id, result.version.modifications_count
        )

    @rule(suffix=suffixes, value=values)
    def create_only(self, suffix: str, value: bytes) -> None:
        key = self.key(suffix)
        if key in self.model:
            with pytest.raises(errors.UnexpectedVersion):
                self.client.put(key, value, expected_version=EXPECTED_RECORD_DOES_NOT_EXIST)
            return
        result = self.client.put(key, value, expected_version=EXPECTED_RECORD_DOES_NOT_EXIST)
        self.model[key] = Stored(value, result.version.version_id, 0)

    @rule(suffix=suffixes, value=values, stale=st.booleans())
    def conditional_put(self, suffix: str, value: bytes, stale: bool) -> None:
        key = self.key(suffix)
        stored = self.model.get(key)
        if stored is None:
            return
        if stale:
            with pytest.raises(errors.UnexpectedVersion):
                self.client.put(key, value, expected_version=stored.version_id - 1)
            return
        result = self.client.put(key, value, expected_version=stored.version_id)
        self.model[key] = Stored(value, result.version.version_id, stored.modifications + 1)

    @rule(suffix=suffixes, conditional=st.booleans())
    def delete(self, suffix: str, conditional: bool) -> None:
        key = self.key(suffix)
        stored = self.model.pop(key, None)
        if stored is None:
            with pytest.raises(errors.KeyNotFound):
                self.client.delete(key)
            return
        self.client.delete(key, expected_version=stored.version_id if conditional else None)

    @rule(first=suffixes, last=suffixes)
    def delete_range(self, first: str, last: str) -> None:
        start, end = self.key(first), self.key(last)
        self.client.delete_range(start, end)
        for key in list(self.model):
            if ORDER.compare(start, key) <= 0 and ORDER.compare(key, end) < 0:
                del self.model[key]

    @rule(
        suffix=suffixes,
        comparison=st.sampled_from(list(Comparison)),
    )
    def get(self, suffix: str, comparison: Comparison) -> None:
        asked = self.key(suffix)
        keys = ordered(list(self.model))
        encode = ORDER.encoder
        candidates = {
            Comparison.EQUAL: [k for k in keys if k == asked],
            Comparison.FLOOR: [k for k in keys if encode(k) <= encode(asked)][-1:],
            Comparison.LOWER: [k for k in keys if encode(k) < encode(asked)][-1:],
            Comparison.CEILING: [k for k in keys if encode(k) >= encode(asked)][:1],
            Comparison.HIGHER: [k for k in keys if encode(k) > encode(asked)][:1],
        }[comparison]
        try:
            found = self.client.get(asked, comparison=comparison)
        except errors.KeyNotFound:
            found = None
        if found is not None and not found.key.startswith(self.prefix):
            found = None  # another run's key, outside this model
        if not candidates:
            assert found is None
            return
        assert found is not None and found.key == candidates[0], (asked, comparison)
        stored = self.model[found.key]
        assert (found.value, found.version.version_id) == (stored.value, stored.version_id)
        assert found.version.modifications_count == stored.modifications

    @invariant()
    def lists_and_scans_agree_with_the_model(self) -> None:
        # In hierarchical order `/p/` .. `/p//` holds exactly the children of /p.
        for parent in (self.prefix, self.prefix + "a/", self.prefix + "b/", self.prefix + "a/b/"):
            children = ordered(
                [k for k in self.model if k.startswith(parent) and "/" not in k[len(parent) :]]
            )
            assert self.client.list(parent, parent + "/") == children, parent
            records = list(self.client.range_scan(parent, parent + "/"))
            assert [r.key for r in records] == children
            assert [r.value for r in records] == [self.model[k].value for k in children]


@pytest.mark.e2e
def test_the_client_behaves_like_a_dict(server: str) -> None:
    ClientAgainstDict.server = server
    runner = ClientAgainstDict.TestCase
    runner.settings = settings(max_examples=15, stateful_step_count=25, deadline=None)
    runner().runTest()
