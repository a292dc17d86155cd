"""choose_leader: who leads a shard after NewTerm, from the members' heads.

The property test is an oracle: it generates shard histories (logs as lists of
entry terms) that a correct replication protocol could produce, marks what
was committed, fences a random majority and checks that the member chosen
holds every committed entry.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cairn.controller.election import CountedVoters, choose_leader, enough_answers, majority

Head = tuple[int, int]
NO_HEAD: Head = (-1, -1)


# -- unit tests --------------------------------------------------------------------------


def test_no_leader_without_a_majority_of_voters() -> None:
    assert choose_leader({"a": (1, 5)}, ["a", "b", "c"], {}) is None
    # Answers from non-voters do not count toward the majority.
    assert choose_leader({"a": (1, 5), "x": (1, 9)}, ["a", "b", "c"], {}) is None
    three_of_five = {"a": (1, 5), "b": (1, 4), "c": (1, 3)}
    assert choose_leader(three_of_five, ["a", "b", "c", "d", "e"], {}) == "a"
    assert choose_leader({}, ["a"], {}) is None
    assert choose_leader({"a": NO_HEAD}, ["a"], {}) == "a"


def test_the_highest_head_wins_by_term_then_offset() -> None:
    heads = {"a": (2, 3), "b": (3, 1), "c": (2, 9)}
    assert choose_leader(heads, ["a", "b", "c"], {}) == "b"
    assert choose_leader({"a": (2, 3), "c": (2, 9)}, ["a", "b", "c"], {}) == "c"


def test_a_non_voter_is_never_chosen_even_with_the_highest_head() -> None:
    heads = {"a": (1, 1), "b": (1, 1), "x": (9, 9)}
    assert choose_leader(heads, ["a", "b", "c"], {}) in {"a", "b"}


def test_ties_go_to_the_least_loaded_then_the_name() -> None:
    heads = {"a": (2, 5), "b": (2, 5), "c": (2, 5)}
    assert choose_leader(heads, ["a", "b", "c"], {"a": 2, "b": 1, "c": 1}) == "b"
    assert choose_leader(heads, ["a", "b", "c"], {"a": 0, "b": 1, "c": 1}) == "a"
    assert choose_leader(heads, ["c", "b", "a"], {}) == "a"


def test_preferred_wins_when_its_head_is_the_best() -> None:
    heads = {"a": (2, 5), "b": (2, 5), "c": (1, 9)}
    assert choose_leader(heads, ["a", "b", "c"], {"b": 5}, preferred="b") == "b"


def test_preferred_behind_wins_only_when_provably_safe() -> None:
    voters = ["a", "b", "c"]
    # Every voter answered, same term, and at least what a majority holds.
    heads = {"a": (2, 9), "b": (2, 7), "c": (2, 7)}
    assert choose_leader(heads, voters, {}, preferred="b") == "b"
    # Below what a majority holds: entries up to 8 may be committed.
    heads = {"a": (2, 9), "b": (2, 7), "c": (2, 8)}
    assert choose_leader(heads, voters, {}, preferred="b") == "a"
    # One voter did not answer: it may hold (and a majority with it) more.
    assert choose_leader({"a": (2, 9), "b": (2, 7)}, voters, {}, preferred="b") == "a"
    # An older term at the head: its log may disagree with the best one.
    heads = {"a": (3, 9), "b": (2, 9), "c": (2, 9)}
    assert choose_leader(heads, voters, {}, preferred="b") == "a"


def test_only_eligible_members_lead_but_every_answer_counts() -> None:
    voters = ["a", "b", "c"]
    # "a" holds the most but may not lead (its pod is going away): "b" may,
    # being safe (every voter answered, same term, holds what a majority holds).
    heads = {"a": (2, 9), "b": (2, 8), "c": (2, 8)}
    assert choose_leader(heads, voters, {}, eligible={"b", "c"}) == "b"
    assert choose_leader(heads, voters, {"b": 1}, eligible={"b", "c"}) == "c"
    # Below what a majority holds: no eligible member is safe, no one leads now.
    heads = {"a": (2, 9), "b": (2, 9), "c": (2, 7)}
    assert choose_leader(heads, voters, {}, eligible={"c"}) is None
    # Not everyone answered: only the best head is known safe.
    assert choose_leader({"a": (2, 9), "c": (2, 9)}, voters, {}, eligible={"c"}) == "c"
    assert choose_leader({"a": (2, 9), "c": (2, 8)}, voters, {}, eligible={"c"}) is None
    assert choose_leader(heads, voters, {}, eligible=set()) is None


def test_preferred_that_did_not_answer_or_is_no_voter_is_ignored() -> None:
    heads = {"a": (1, 3), "b": (1, 3)}
    assert choose_leader(heads, ["a", "b", "c"], {"a": 3}, preferred="c") == "b"
    assert choose_leader(heads, ["a", "b"], {"a": 3}, preferred="x") == "b"


@pytest.mark.parametrize("rf", [2, 4])
def test_hole2_below_the_best_head_only_the_counted_voters_make_the_majority(rf: int) -> None:
    # Issue 38, hole 2. rf 2: "a" leads alone ("b" is a learner), so it may
    # have committed up to 9; "b" holds up to 5. rf 4: "a", "b", "c" vote and
    # "a" and "b" may have committed up to 9; "c" lags, "d" is a learner.
    # Counting the learner as a voter, half the members or more hold 5, which
    # passed for "what a majority holds".
    voters = list("abcd"[:rf])
    heads = {"a": (2, 9), "b": (2, 5)} if rf == 2 else {"a": (2, 9), "b": (2, 9)}
    heads.update({} if rf == 2 else {"c": (2, 5), "d": (2, 5)})
    counted = CountedVoters(2, frozenset(voters[:-1]))
    behind = [name for name, head in heads.items() if head == (2, 5)]
    for preferred in behind:
        assert choose_leader(heads, voters, {}, preferred, counted=counted) == "a"
        assert choose_leader(heads, voters, {}, None, set(behind), counted) is None
    # Without the learner, what every voter holds decides, as before.
    assert choose_leader(heads, voters, {}, behind[0], counted=CountedVoters(2, frozenset(voters)))
    # Voters a leader of another term counted say nothing of this one's; and
    # fewer known voters only make the choice more careful.
    heads = {"a": (2, 9), "b": (2, 7), "c": (2, 7)}
    assert choose_leader(heads, list("abc"), {}, "b") == "b"
    assert (
        choose_leader(heads, list("abc"), {}, "b", counted=CountedVoters(1, frozenset("abc")))
        == "a"
    )
    assert (
        choose_leader(heads, list("abc"), {}, "b", counted=CountedVoters(2, frozenset("a"))) == "a"
    )
    assert (
        choose_leader(heads, list("abc"), {}, "b", counted=CountedVoters(2, frozenset("bc"))) == "b"
    )


def test_half_of_an_even_ensemble_elects_when_its_leader_committed_in_its_term() -> None:
    # rf 2: "b" lost its disk (its answer does not count); "a" holds all that
    # both voters acknowledged, and every commit needed "a".
    counted = CountedVoters(3, frozenset("ab"), committed_in_term=True)
    assert choose_leader({"a": (3, 9)}, list("ab"), {}, counted=counted) == "a"
    # rf 4: two counted voters of four meet every three of the four.
    heads = {"a": (3, 7), "c": (3, 9)}
    counted = CountedVoters(3, frozenset("abcd"), committed_in_term=True)
    assert choose_leader(heads, list("abcd"), {}, counted=counted) == "c"
    # Odd ensembles are unchanged: half is not a majority, and never enough.
    counted = CountedVoters(3, frozenset("abc"), committed_in_term=True)
    assert choose_leader({"a": (3, 9)}, list("abc"), {}, counted=counted) is None


def test_half_is_not_enough_before_the_leader_committed_in_its_term() -> None:
    # "a" led term 2 with "b" and "c" ("d" a learner) and committed offset 9 on
    # "a" and "b"; elected for term 3 and counting "d" at once, "a" died before
    # committing in term 3. "c" and "d" lack 9: were two answers of four enough,
    # they would elect one of them. Before its own commit, the leader's report
    # says nothing of what earlier voters hold.
    heads = {"c": (2, 5), "d": (2, 5)}
    counted = CountedVoters(3, frozenset("abcd"), committed_in_term=False)
    assert choose_leader(heads, list("abcd"), {}, counted=counted) is None
    assert not enough_answers("cd", list("abcd"), counted)


def test_half_elects_before_the_term_committed_when_its_leader_answers() -> None:
    # Simulation wipes seed 110: rf 2, "a" led term 3 but had committed nothing
    # in it yet when it restarted; "b" lost its disk. "a" was elected holding
    # everything committed before term 3, and every commit of term 3 needs it:
    # its answer alone is enough.
    counted = CountedVoters(3, frozenset("a"), committed_in_term=False, leader="a")
    assert enough_answers("a", list("ab"), counted)
    assert choose_leader({"a": (3, 9)}, list("ab"), {}, counted=counted) == "a"
    # Not so for a member other than the leader (it may lack earlier commits) ...
    counted = CountedVoters(3, frozenset("ab"), committed_in_term=False, leader="a")
    assert not enough_answers("b", list("ab"), counted)
    # ... and rf 4 still needs answers from as many counted members as do not answer.
    counted = CountedVoters(3, frozenset("ac"), committed_in_term=False, leader="a")
    assert enough_answers("ac", list("abcd"), counted)
    assert not enough_answers("ab", list("abcd"), counted)


def test_half_is_not_enough_when_an_answer_may_be_a_learner() -> None:
    # "d" may still be catching up, uncounted: of the three voters, "a" alone
    # answers, and "b" and "c" may have committed without it.
    counted = CountedVoters(3, frozenset("abc"), committed_in_term=True)
    assert not enough_answers("ad", list("abcd"), counted)
    assert enough_answers("abd", list("abcd"), counted)
    # Counted by an earlier term's leader: nothing is known of this one's voters.
    old = CountedVoters(2, frozenset("abcd"), committed_in_term=True)
    assert choose_leader({"a": (3, 4), "b": (3, 4)}, list("abcd"), {}, counted=old) is None


# -- the oracle --------------------------------------------------------------------------


@dataclass
class History:
    logs: dict[str, list[int]]
    committed: list[int]


def common_prefix(a: list[int], b: list[int]) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


@st.composite
def histories(draw: st.DrawFn) -> tuple[History, list[str]]:
    """A shard's logs after a few terms of one leader each. Each term's leader
    holds every entry committed so far (as any correct election ensures); it
    writes the term's first entry and some more; each other member takes the
    leader's log up to a point (never dropping what agrees with it); what a
    majority holds from the term's first entry on is committed."""
    size = draw(st.integers(1, 7))
    members = [f"m{i}" for i in range(size)]
    logs: dict[str, list[int]] = {name: [] for name in members}
    committed: list[int] = []
    for term in range(1, draw(st.integers(1, 6)) + 1):
        eligible = [m for m in members if logs[m][: len(committed)] == committed]
        leader = draw(st.sampled_from(eligible))
        start = len(logs[leader])
        logs[leader] = logs[leader] + [term] * draw(st.integers(1, 6))
        log = logs[leader]
        for name in members:
            if name == leader or not draw(st.booleans()):
                continue  # not reached this term
            shared = common_prefix(logs[name], log)
            reached = st.sampled_from([shared, len(log)]) | st.integers(shared, len(log))
            logs[name] = log[: draw(reached)]
        for offset in range(len(log) - 1, start - 1, -1):
            holders = sum(1 for m in members if logs[m][: offset + 1] == log[: offset + 1])
            if holders >= majority(size):
                if offset + 1 > len(committed):
                    committed = log[: offset + 1]
                break
    return History(logs, committed), members


def head(log: list[int]) -> Head:
    return (log[-1], len(log) - 1) if log else NO_HEAD


@st.composite
def prefixes_of_one_log(draw: st.DrawFn) -> tuple[History, list[str]]:
    """The common case in detail: the last leader's log, of which every member
    holds a prefix (followers behind by various amounts, some of the same
    term as the head); what a majority holds is committed."""
    size = draw(st.integers(1, 7))
    members = [f"m{i}" for i in range(size)]
    log = sorted(draw(st.lists(st.integers(1, 3), min_size=1, max_size=10)))
    # Often two groups: up to date, and behind by some amount (the hard case:
    # a bare majority up to date, and a majority answering that is mostly behind).
    cut = draw(st.integers(0, len(log)))
    grouped = draw(st.booleans())
    lengths = st.sampled_from([cut, len(log)]) if grouped else st.integers(0, len(log))
    logs = {name: log[: draw(lengths)] for name in members}
    held = sorted((len(held) for held in logs.values()), reverse=True)[majority(size) - 1]
    return History(logs, log[:held]), members


@st.composite
def stale_branch(draw: st.DrawFn) -> tuple[History, list[str]]:
    """A leader of an older term wrote entries no one else took (never
    committed), then a newer leader went on from the shared part: a minority
    holds the stale branch, perhaps longer than the new one."""
    size = draw(st.integers(2, 7))
    members = [f"m{i}" for i in range(size)]
    base = sorted(draw(st.lists(st.integers(1, 2), max_size=3)))
    old = base + [3] * draw(st.integers(1, 8))
    new = base + [4] * draw(st.integers(1, 8))
    stale = draw(st.integers(1, majority(size) - 1)) if size > 2 else 0
    logs = {
        name: old[: draw(st.integers(len(base) + 1, len(old)))]
        if index < stale
        else new[: draw(st.sampled_from([len(base), len(new)]) | st.integers(0, len(new)))]
        for index, name in enumerate(members)
    }
    held = sorted((common_prefix(log, new) for log in logs.values()), reverse=True)
    return History(logs, new[: held[majority(size) - 1]]), members


def check_choice(history: History, members: list[str], data: st.DataObject) -> None:
    """Fence a majority (all, those furthest behind, or any), let only some
    lead (or all), prefer one (or no one), and choose."""
    least = majority(len(members))
    how = data.draw(st.sampled_from(["all", "behind", "any"]))
    if how == "all":
        answering = list(members)
    elif how == "behind":
        by_length = sorted(members, key=lambda name: (len(history.logs[name]), name))
        answering = by_length[: data.draw(st.just(least) | st.integers(least, len(members)))]
    else:
        answering = data.draw(
            st.lists(st.sampled_from(members), unique=True, min_size=least, max_size=len(members))
        )
    heads = {name: head(history.logs[name]) for name in answering}
    preferred = data.draw(
        st.one_of(st.sampled_from(answering), st.sampled_from(answering), st.none())
        | st.sampled_from(members)
    )
    load = data.draw(st.dictionaries(st.sampled_from(members), st.integers(0, 3)))
    eligible = data.draw(st.none() | st.sets(st.sampled_from(members)))
    chosen = choose_leader(heads, members, load, preferred, eligible)
    allowed = [name for name in answering if eligible is None or name in eligible]
    best = max(heads.values())
    if any(heads[name] == best for name in allowed):
        assert chosen is not None  # a member with the best head may always lead
    if chosen is None:
        return
    assert chosen in allowed
    assert history.logs[chosen][: len(history.committed)] == history.committed, (
        f"{chosen} ({history.logs[chosen]}) lacks committed {history.committed}"
    )
    if preferred in allowed and heads[preferred] == best:
        assert chosen == preferred
    if chosen != preferred and any(heads[name] == best for name in allowed):
        assert heads[chosen] == best  # the longest log, unless none may lead


@settings(max_examples=300, deadline=None)
@given(histories(), st.data())
def test_the_chosen_member_holds_every_committed_entry(
    history_members: tuple[History, list[str]], data: st.DataObject
) -> None:
    check_choice(*history_members, data)


@settings(max_examples=600, deadline=None)
@given(stale_branch(), st.data())
def test_a_stale_longer_log_is_never_chosen_over_committed_entries(
    history_members: tuple[History, list[str]], data: st.DataObject
) -> None:
    check_choice(*history_members, data)


@settings(max_examples=1000, deadline=None)
@given(prefixes_of_one_log(), st.data())
def test_a_lagging_preferred_member_is_chosen_only_if_it_holds_every_committed_entry(
    history_members: tuple[History, list[str]], data: st.DataObject
) -> None:
    check_choice(*history_members, data)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from("abcdefg"),
        st.tuples(st.integers(-1, 3), st.integers(-1, 9)),
        min_size=1,
    ),
    st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=7, unique=True),
    st.dictionaries(st.sampled_from("abcdefg"), st.integers(0, 3)),
)
def test_without_preference_the_best_head_wins_by_load_then_name(
    heads: dict[str, Head], voters: list[str], load: dict[str, int]
) -> None:
    chosen = choose_leader(heads, voters, load)
    answered = {name: h for name, h in heads.items() if name in voters}
    if len(answered) < majority(len(voters)):
        assert chosen is None
        return
    best = max(answered.values())
    tied = sorted(name for name, h in answered.items() if h == best)
    assert chosen == min(tied, key=lambda name: (load.get(name, 0), name))


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6, 7])
def test_exactly_a_majority_suffices(size: int) -> None:
    voters = [f"m{i}" for i in range(size)]
    enough = {name: (1, i) for i, name in enumerate(voters[: majority(size)])}
    assert choose_leader(enough, voters, {}) == voters[majority(size) - 1]
    fewer = dict(list(enough.items())[:-1])
    assert choose_leader(fewer, voters, {}) is None


@st.composite
def learners_behind(draw: st.DrawFn) -> tuple[History, list[str], CountedVoters]:
    """The last leader's log, of which every member holds a prefix; the
    leader's voters are itself and every member but perhaps one learner (one
    change at a time), which holds any prefix (it votes once its
    acknowledgement reaches the commit offset); what a majority of the voters
    holds may be committed. The controller knows some of the voters (its
    report of them is stale, or missing), and perhaps as of another term."""
    size = draw(st.integers(2, 7))
    members = [f"m{i}" for i in range(size)]
    log = sorted(draw(st.lists(st.integers(1, 3), min_size=1, max_size=10)))
    learner = draw(st.none() | st.sampled_from(members[1:]))
    voters = [name for name in members if name != learner]
    logs = {name: log[: draw(st.integers(0, len(log)))] for name in members}
    logs[members[0]] = log
    held = sorted((len(logs[name]) for name in voters), reverse=True)[majority(len(voters)) - 1]
    known = draw(st.sets(st.sampled_from(voters)))
    term = draw(st.sampled_from([log[-1], log[-1], log[-1] - 1]))
    return History(logs, log[:held]), members, CountedVoters(term, frozenset(known))


@settings(max_examples=1000, deadline=None)
@given(learners_behind(), st.data())
def test_a_member_behind_the_best_head_is_chosen_only_if_it_holds_what_the_voters_committed(
    history_members_counted: tuple[History, list[str], CountedVoters], data: st.DataObject
) -> None:
    history, members, counted = history_members_counted
    answering = data.draw(
        st.lists(
            st.sampled_from(members),
            unique=True,
            min_size=majority(len(members)),
            max_size=len(members),
        )
        | st.just(members)
    )
    heads = {name: head(history.logs[name]) for name in answering}
    preferred = data.draw(st.none() | st.sampled_from(answering))
    eligible = data.draw(st.none() | st.sets(st.sampled_from(members)))
    chosen = choose_leader(heads, members, {}, preferred, eligible, counted)
    if chosen is not None:
        assert history.logs[chosen][: len(history.committed)] == history.committed, (
            f"{chosen} ({history.logs[chosen]}) lacks committed {history.committed}"
        )


@st.composite
def counted_in_term(draw: st.DrawFn) -> tuple[History, list[str], CountedVoters]:
    """The last leader (of term 3, m0) after it committed an entry of its
    term: its log ends in entries of that term, every member holds a prefix of
    it, and at most one member is a learner (one change at a time). What a
    majority of the final voters holds is committed (a voter made since the
    first commit of the term holds what was committed when it joined, so that
    stays true). The controller's report of the voters is of some moment after
    that first commit: it names a subset of the final voters."""
    size = draw(st.integers(2, 6))
    members = [f"m{i}" for i in range(size)]
    term = 3
    earlier = sorted(draw(st.lists(st.integers(1, 2), max_size=6)))
    log = earlier + [term] * draw(st.integers(1, 6))
    logs = {name: log[: draw(st.integers(0, len(log)))] for name in members}
    logs[members[0]] = log
    learner = draw(st.none() | st.sampled_from(members[1:]))
    voters = [name for name in members if name != learner]
    held = sorted((len(logs[name]) for name in voters), reverse=True)[majority(len(voters)) - 1]
    assume(held > len(earlier))  # the term's first entry is committed
    known = draw(st.sets(st.sampled_from(voters)))
    return History(logs, log[:held]), members, CountedVoters(term, frozenset(known), True)


@st.composite
def led_in_term(draw: st.DrawFn) -> tuple[History, list[str], CountedVoters]:
    """The last leader (of term 3, m0) whose own term may not have committed
    yet, as far as the controller knows: what a majority of the voters holds
    beyond the earlier terms' entries is committed; of the earlier terms'
    entries, a prefix was committed before term 3, which m0 holds (it was
    elected holding it) and other members may lack. The controller knows the
    leader counts itself, and perhaps some other voters."""
    size = draw(st.integers(2, 6))
    members = [f"m{i}" for i in range(size)]
    term = 3
    earlier = sorted(draw(st.lists(st.integers(1, 2), max_size=6)))
    log = earlier + [term] * draw(st.integers(0, 6))
    logs = {name: log[: draw(st.integers(0, len(log)))] for name in members}
    logs[members[0]] = log
    learner = draw(st.none() | st.sampled_from(members[1:]))
    voters = [name for name in members if name != learner]
    lengths = sorted((len(logs[name]) for name in voters), reverse=True)
    held = lengths[majority(len(voters)) - 1]
    # What earlier terms committed meets every majority of the voters (else no
    # rule could elect safely): voters handed to the leader lacking it are too
    # few to make a majority on their own.
    met = lengths[len(voters) - majority(len(voters))]
    # A majority of all the members, the learner included, elects too
    # (enough_answers), so it must meet that as well. It does: a member is
    # added (as a learner) only once a majority holds the term's first entry,
    # and a learner votes only once it holds that entry too (planner,
    # QuorumTracker; the history where it did not, issue 38, is in
    # test_election_exhaustive.py). No election rule could save a history
    # where it did not: a majority of the members would lack the entry.
    everyone = sorted((len(logs[name]) for name in members), reverse=True)
    met = min(met, everyone[len(members) - majority(len(members))])
    committed_before = draw(st.integers(0, min(len(earlier), met)))
    committed = held if held > len(earlier) else committed_before
    known = draw(st.sets(st.sampled_from(voters))) | {members[0]}
    counted = CountedVoters(term, frozenset(known), leader=members[0])
    return History(logs, log[:committed]), members, counted


@settings(max_examples=1000, deadline=None)
@given(st.one_of(counted_in_term(), led_in_term()), st.data())
def test_answers_enough_for_an_even_ensemble_hold_every_committed_entry(
    history_members_counted: tuple[History, list[str], CountedVoters], data: st.DataObject
) -> None:
    history, members, counted = history_members_counted
    answering = data.draw(st.lists(st.sampled_from(members), unique=True, min_size=1))
    heads = {name: head(history.logs[name]) for name in answering}
    preferred = data.draw(st.none() | st.sampled_from(answering))
    chosen = choose_leader(heads, members, {}, preferred, None, counted)
    # Enough answers always elect someone (the best head is always safe) ...
    assert (chosen is not None) == enough_answers(answering, members, counted)
    # ... who holds every committed entry.
    if chosen is not None:
        assert history.logs[chosen][: len(history.committed)] == history.committed, (
            f"{chosen} ({history.logs[chosen]}) lacks committed {history.committed}"
        )
