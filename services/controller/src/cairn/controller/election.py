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

"A majority of the voters" there means a majority of those the leader counted
toward its commit offset, which are not always all the members: a member joins
as a learner and counts only once it has caught up with the commit offset.
Counting a learner would make the majority larger, and, as a learner's head is
low, the offset it holds lower: in an ensemble of two (one voter, one learner)
the learner would be judged to hold everything committed, whatever it lacks.
The controller knows who counts from the leader's last report, or else from
its record of the leader's term (the members it handed the leader, and those
added since that a report showed voting: planner.counted_voters), so the
rule takes the members it knows count (`CountedVoters`): committed entries are
held by a majority of the actual voters, who are at least those, so by at least
a majority of that many of the members that answered. Knowing fewer is safe,
only more careful: knowing none, only the highest head is safe.

How many answers are enough: the answering members must meet every set of
voters the last leader could have committed with, and every set it could still
commit with (those NewTerm fenced no longer acknowledge its term). A majority of
the members always does, as any two majorities meet. With an even number of
members half can be enough (`enough_answers`): two answering members of four
whose acknowledgements the leader counted meet every three of those four and
any two of three once one has left. That covers what the leader's own term
committed; entries earlier terms committed lie on a majority of the earlier
voters, and a member made a voter since may lack them. They are held by the
answering members when the leader's term committed its first entry (its
report shows the commit offset there or past it: members counted since then
hold all before it, as a learner votes only once it holds that entry), or
when the leader itself answers with its data: it was elected holding every
entry committed before its term, and a leader never drops an
entry of its own durable log. The leader always counts itself, so a controller
that has no report of it (restarted since) still knows that much: with two
members, the last leader answering alone is enough. Members of four that answer
but are not known to count (a learner, perhaps) do not help: half of four with
one of them uncounted is one of three.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass


def majority(count: int) -> int:
    return count // 2 + 1


@dataclass(frozen=True)
class CountedVoters:
    """Members that the shard's leader of `term` counted toward its commit
    offset (itself, and the followers it reported voting). They remain voters
    for the rest of that term unless removed, so the caller leaves out members
    being removed."""

    term: int
    members: frozenset[str]
    # The leader's report showed its commit offset at or past its term's first
    # entry: every entry committed before is then held by a majority of these
    # voters too (a learner votes only once it holds that entry).
    committed_in_term: bool = False
    # The member chosen to lead `term` (one of `members` when named): it holds
    # every entry committed before `term` as long as it holds its data.
    leader: str | None = None


def enough_answers(
    answering: Collection[str], voters: Sequence[str], counted: CountedVoters | None
) -> bool:
    """Do answers from `answering` meet every commit quorum of the last leader
    (see the module's docstring)? A majority of `voters` always does. Else,
    enough of the members it counted: at least as many as members not
    answering. Any set of voters it may count holds those it counted (they vote
    until removed, and members being removed are left out of `counted`) and
    perhaps some of the rest, so the worst case is those it counted that
    answer plus every member that did not, and a commit quorum of that set meets
    the first part exactly when the first part is no smaller than the second.
    That is what its own term committed; what earlier terms committed is held
    by the answers once its term has committed an entry, or when the leader
    itself answers."""
    members = set(voters)
    answered = members & set(answering)
    if len(answered) >= majority(len(members)):
        return True
    if counted is None:
        return False
    if not counted.committed_in_term and counted.leader not in answered:
        return False
    return len(answered & counted.members) >= len(members - answered)


def choose_leader(
    heads: Mapping[str, tuple[int, int]],
    voters: Sequence[str],
    leaders_per_node: Mapping[str, int],
    preferred: str | None = None,
    eligible: Collection[str] | None = None,
    counted: CountedVoters | None = None,
) -> str | None:
    """The member to make leader, or None without enough answers from
    `voters` (`enough_answers`; or without a safe eligible member). `heads` maps members that
    answered to their head (term, offset). Only `eligible` members (default: all)
    may lead: a member judged failed can still answer NewTerm (its pod is being
    deleted, say) and its head still counts for safety, but electing it would
    only have to be undone. `counted` is who the last leader counted toward
    its commit offset, as far as is known; without it every member of `voters`
    counts (as they all do once a leader takes office)."""
    answered = {name: head for name, head in heads.items() if name in voters}
    if not answered:
        return None
    best_head = max(answered.values())
    # Voters an earlier term's leader counted say nothing of the later one's.
    current = counted if counted is not None and counted.term >= best_head[0] else None
    if not enough_answers(answered, voters, current):
        return None
    held = _held_by_majority(answered, voters, counted, best_head)
    allowed = [name for name in answered if eligible is None or name in eligible]
    if (
        preferred is not None
        and preferred in allowed
        and _is_safe(answered[preferred], best_head, held)
    ):
        return preferred
    safe = [name for name in allowed if _is_safe(answered[name], best_head, held)]
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


def _held_by_majority(
    answered: Mapping[str, tuple[int, int]],
    voters: Sequence[str],
    counted: CountedVoters | None,
    best_head: tuple[int, int],
) -> int | None:
    """An offset at or beyond every committed entry, judged from the answers:
    the one held by a majority of the members known to count (the voters of
    the best head's term, whose leader wrote it). None unless every voter
    answered: one that did not may hold more, and a majority with it."""
    members = set(voters)
    if len(answered) < len(members):
        return None
    if counted is None:
        known = len(members)
    elif counted.term == best_head[0]:
        known = len(counted.members & members)
    else:
        known = 0  # counted by another term's leader: nothing is known of this one
    offsets = sorted((offset for _, offset in answered.values()), reverse=True)
    return offsets[majority(known) - 1]


def _is_safe(head: tuple[int, int], best_head: tuple[int, int], held: int | None) -> bool:
    if head == best_head:
        return True
    return held is not None and head[0] == best_head[0] and head[1] >= held
