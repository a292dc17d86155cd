"""Choosing nodes for ensemble members: pure, deterministic.

Members are picked one at a time: first the candidates that share no
anti-affinity label value with the members already chosen (for every label
key), then the least loaded, then by name. With one anti-affinity key and at
least as many distinct values among the candidates as members wanted, every
ensemble therefore spans distinct values; with fewer, it spreads as far as it
can (soft anti-affinity: a shard is better placed on one zone than not at all).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cairn.controller.model import ShardRecord


@dataclass(frozen=True)
class Candidate:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def member_load(shards: Iterable[ShardRecord]) -> Counter[str]:
    """How many replicas each node holds or is about to (leaving ones too)."""
    load: Counter[str] = Counter()
    for record in shards:
        for name in record.voters:
            load[name] += 1
    return load


def leader_load(shards: Iterable[ShardRecord]) -> Counter[str]:
    return Counter(record.leader for record in shards if record.leader is not None)


def conflicts(
    candidate: Candidate,
    members: Sequence[Candidate],
    anti_affinity: Sequence[str],
) -> int:
    """How many (key, member) pairs share a label value with the candidate."""
    count = 0
    for key in anti_affinity:
        value = candidate.labels.get(key)
        if value is None:
            continue
        count += sum(1 for member in members if member.labels.get(key) == value)
    return count


def pick_members(
    candidates: Sequence[Candidate],
    members: Sequence[Candidate],
    count: int,
    load: Mapping[str, int],
    anti_affinity: Sequence[str],
) -> list[str]:
    """Up to `count` candidates to add to an ensemble that has `members`."""
    chosen: list[Candidate] = []
    taken = {member.name for member in members}
    pool = [candidate for candidate in candidates if candidate.name not in taken]
    for _ in range(count):
        if not pool:
            break
        placed = [*members, *chosen]
        best = min(
            pool,
            key=lambda c: (conflicts(c, placed, anti_affinity), load.get(c.name, 0), c.name),
        )
        chosen.append(best)
        pool.remove(best)
    return [candidate.name for candidate in chosen]


def pick_member_to_remove(
    members: Sequence[Candidate],
    leader: str | None,
    load: Mapping[str, int],
    anti_affinity: Sequence[str],
    prefer: Iterable[str] = (),
) -> str | None:
    """The follower whose removal leaves the best ensemble: one of `prefer`
    first (dead or unwanted nodes), then the one sharing the most label values
    with the others, then the most loaded."""
    preferred = set(prefer)
    followers = [member for member in members if member.name != leader]
    if not followers:
        return None

    def badness(member: Candidate) -> tuple[int, int, int, str]:
        others = [m for m in members if m.name != member.name]
        return (
            member.name in preferred,
            conflicts(member, others, anti_affinity),
            load.get(member.name, 0),
            member.name,
        )

    return max(followers, key=badness).name
