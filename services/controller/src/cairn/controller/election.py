"""Choosing a shard's new leader from the members' answers to NewTerm. Pure.

Every answer is the member's durable head `(term, offset)` after it was fenced.
An entry acknowledged to a client was durable on a majority of the voters, so
the highest head among any majority of them contains it: that member is always
a safe choice (ties go to the least loaded node, then the name).

A member whose head is not the highest (preferred by a leader move, or the best
of the members still eligible) is safe to choose when every voter answered (so
nothing can change any more, and nothing unseen can have been committed), its
head is of the same term as the highest head (so its log is a prefix of that
one: both were written by that term's single leader) and its head is at least
the offset that a majority of the voters hold (nothing beyond that can have been
committed). Otherwise the highest head wins (a move is retried later), or, if
only ineligible members hold it, no one is chosen now.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence


def majority(count: int) -> int:
    return count // 2 + 1


def choose_leader(
    heads: Mapping[str, tuple[int, int]],
    voters: Sequence[str],
    leaders_per_node: Mapping[str, int],
    preferred: str | None = None,
    eligible: Collection[str] | None = None,
) -> str | None:
    """The member to make leader, or None without answers from a majority of
    `voters` (or without a safe eligible member). `heads` maps members that
    answered to their head (term, offset). Only `eligible` members (default: all)
    may lead: a member judged failed can still answer NewTerm (its pod is being
    deleted, say) and its head still counts for safety, but electing it would
    only have to be undone."""
    answered = {name: head for name, head in heads.items() if name in voters}
    if len(answered) < majority(len(voters)):
        return None
    best_head = max(answered.values())
    allowed = [name for name in answered if eligible is None or name in eligible]
    if (
        preferred is not None
        and preferred in allowed
        and _is_safe(answered, voters, preferred, best_head)
    ):
        return preferred
    safe = [name for name in allowed if _is_safe(answered, voters, name, best_head)]
    if not safe:
        return None
    # The longest safe log, then ties: the preferred member, the least loaded node.
    return min(
        safe,
        key=lambda name: (
            tuple(-part for part in answered[name]),
            name != preferred,
            leaders_per_node.get(name, 0),
            name,
        ),
    )


def _is_safe(
    answered: Mapping[str, tuple[int, int]],
    voters: Sequence[str],
    preferred: str,
    best_head: tuple[int, int],
) -> bool:
    head = answered[preferred]
    if head == best_head:
        return True
    if len(answered) < len(set(voters)) or head[0] != best_head[0]:
        return False
    offsets = sorted((offset for _, offset in answered.values()), reverse=True)
    held_by_majority = offsets[majority(len(offsets)) - 1]
    return head[1] >= held_by_majority
