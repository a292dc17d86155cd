"""A scripted controller for the shard: elections and ensemble changes.

Only scripted scenarios (scenario.py) use it now: they need to elect exactly
the member they name at the moment they say, which the real controller (see
controller.py, what the random runs use) rightly refuses to do.

An election: a new term (one more than any term it ever used, which is durable
in the cluster state), NewTerm to every member, and once a majority answered
within `election_timeout_steps`, BecomeLeader for the one with the highest head
(term, then offset) with the other members as followers. It elects when the
leader is down, unreachable or no longer leading, and now and then for no reason.

Ensemble changes, one at a time: add a fresh empty replica or remove a follower,
keeping the ensemble between `min_size` and `max_size` (never below 3). Elections
count a majority of the controller's ensemble, commits a majority of the
leader's voters. One change keeps every majority of the new ensemble
intersecting every majority of the old one, so it is safe if, before it,
(1) the leader's voters are the controller's ensemble, and (2) everything
committed is on a majority of them. So a change waits for a leader's status
(GetStatus, asked after the previous change was confirmed) saying that every
member votes and that a majority of the voters acknowledged the commit offset
in this term. Both were found missing by this simulation:
- without (1): adding d to {a,b,c} (d is a learner until it catches up), then
  removing c, lets {a,d} elect while only {b,c} hold what was committed;
- without (2), e.g. waiting only for the term's first entry to commit: removing
  e from {a,b,c,d,e} where {c,d,e} committed, then adding f, lets {a,b,f} elect.

Lost disks: the controller records, per member, the incarnation of the data
it holds the shard's entries with (at an election for the members that
answered, at an addition for the new member). A member answering NewTerm with
another one was wiped and holds less than it did: its answer does not count.
BecomeLeader hands the records to the leader, which readmits such a member as
a learner; once a leader's status shows it voting again (caught up), the
controller records its new incarnation.

A crash of the controller forgets what is in flight (the election, the change);
the cluster state (highest term, ensemble, last leader, incarnations) survives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cairn.storage.core.replication.terms import EntryId
from simulation import messages as m
from simulation.context import Env
from simulation.network import Envelope
from simulation.replica import member_of

NAME = "controller"


@dataclass(frozen=True, slots=True)
class CoordinatorSettings:
    min_size: int
    max_size: int
    election_timeout_steps: int = 25
    change_timeout_steps: int = 25
    max_election_backoff_steps: int = 8
    random_election_probability: float = 0.004
    ensemble_change_probability: float = 0.006


@dataclass
class Election:
    term: int
    started_step: int
    ensemble: tuple[str, ...]
    answers: dict[str, EntryId] = field(default_factory=dict)
    incarnations: dict[str, int] = field(default_factory=dict)
    chosen: str | None = None


@dataclass
class StatusRequest:
    request_id: int
    term: int
    sent_step: int


@dataclass
class EnsembleChange:
    term: int
    follower: str
    started_step: int
    # A removed member's recorded incarnation, kept in case the leader refuses.
    incarnation: int | None = None


class Coordinator:
    def __init__(
        self,
        env: Env,
        ensemble: list[str],
        settings: CoordinatorSettings,
        spawn_replica: Callable[[], str],
        is_leading: Callable[[str, int], bool],
        incarnation_of: Callable[[str], int] | None = None,
    ) -> None:
        """`incarnation_of`: a new member's incarnation (what NewTerm creating its
        replica would answer)."""
        self.env = env
        self.settings = settings
        # Whether a member's pod is up without the shard's replica (World sets it).
        self.lacks_replica: Callable[[str], bool] = lambda name: False
        self.next_recreate_step = 0
        self.spawn_replica = spawn_replica
        self.is_leading = is_leading
        self.incarnation_of = incarnation_of
        # Cluster state (durable).
        self.highest_term = 0
        self.ensemble = list(ensemble)
        self.leader: tuple[int, str] | None = None
        self.incarnations: dict[str, int] = {}
        # Volatile.
        self.incarnation = 0
        self.election: Election | None = None
        self.change: EnsembleChange | None = None
        # The leader was told the current ensemble (BecomeLeader or a confirmed change).
        self.ensemble_confirmed = False
        self.status_request: StatusRequest | None = None
        self.last_request_id = 0
        self.next_election_step = 0
        self.elections_started = 0
        self.changes_started = 0
        self.restart()

    def restart(self) -> None:
        self.incarnation += 1
        self.election = None
        self.change = None
        self.ensemble_confirmed = False
        self.status_request = None
        self.env.net.up(NAME, self.incarnation)

    def crash(self) -> None:
        self.env.log(f"{NAME} crashes", "controller crashes")
        self.env.net.down(NAME)
        self.restart()

    # -- each step ---------------------------------------------------------------------

    def tick(self, faults: bool) -> None:
        env, settings = self.env, self.settings
        election = self.election
        if election is not None:
            if env.now - election.started_step > settings.election_timeout_steps:
                env.log(
                    f"{NAME} gives up the election of term {election.term}", "elections given up"
                )
                self.election = None
                self._back_off()
            return
        change = self.change
        if change is not None and env.now - change.started_step > settings.change_timeout_steps:
            env.log(f"{NAME} gives up waiting for the change of {change.follower}")
            self.change = None
        leader = self.leader
        if leader is None or not self.is_leading(leader[1], leader[0]):
            if env.now >= self.next_election_step:
                self.start_election("no leader" if leader is None else f"{leader[1]} is gone")
            return
        self._recreate_lost_replicas(leader[0])
        if not faults:
            return
        if env.rng.random() < settings.random_election_probability:
            self.start_election("for no reason")
        elif (
            self.change is None
            and self.ensemble_confirmed
            and env.rng.random() < settings.ensemble_change_probability
        ):
            self._prepare_change(leader)
        request = self.status_request
        if request is not None and env.now - request.sent_step > settings.change_timeout_steps:
            self.status_request = None

    def _recreate_lost_replicas(self, term: int) -> None:
        """A member whose pod lost the shard's replica (a wiped disk) gets one
        again: NewTerm at the leader's term creates it, and the leader, which
        keeps trying it, then catches it up (the executor re-adds such a member
        the same way)."""
        if self.env.now < self.next_recreate_step:
            return
        for name in self.ensemble:
            if self.lacks_replica(name):
                self.env.log(f"{NAME} re-creates {name}'s replica at term {term}")
                self.env.send(NAME, name, m.NewTerm(term))
                self.next_recreate_step = self.env.now + self.settings.change_timeout_steps

    def start_election(self, why: str) -> None:
        self.highest_term += 1
        term = self.highest_term
        self.leader = None
        self.change = None
        self.status_request = None
        self.election = Election(term, self.env.now, tuple(self.ensemble))
        self.elections_started += 1
        self.env.log(f"{NAME} elects for term {term} in {self.ensemble}: {why}", "elections")
        for name in self.ensemble:
            self.env.send(NAME, name, m.NewTerm(term))

    def intact(self, name: str, incarnation: int) -> bool:
        """Does `name`, answering with `incarnation`, hold the data recorded?"""
        recorded = self.incarnations.get(name)
        return recorded is None or incarnation == 0 or incarnation == recorded

    def choose_leader(self, answers: dict[str, EntryId]) -> str:
        """The member with the highest head; ties broken at random."""
        best = max(answers.values())
        return self.env.rng.choice(sorted(name for name, head in answers.items() if head == best))

    def _back_off(self) -> None:
        self.next_election_step = self.env.now + self.env.rng.randint(
            1, self.settings.max_election_backoff_steps
        )

    def _prepare_change(self, leader: tuple[int, str]) -> None:
        """Ask the leader whether a change is safe now; `_change_ensemble` follows
        if it is."""
        if self.status_request is not None:
            return
        self.last_request_id += 1
        self.status_request = StatusRequest(self.last_request_id, leader[0], self.env.now)
        self.env.send(NAME, leader[1], m.GetStatus(leader[0], self.last_request_id))

    def ready_for_change(self, status: m.StatusResponse) -> bool:
        voters = {name for name, _ in status.voters}
        holding = sum(1 for _, acked in status.voters if acked >= status.commit_offset)
        return voters == set(self.ensemble) and holding * 2 > len(voters)

    def _change_ensemble(self, leader: tuple[int, str]) -> None:
        term, leader_name = leader
        size = len(self.ensemble)
        can_add, can_remove = size < self.settings.max_size, size > self.settings.min_size
        if not (can_add or can_remove):
            return
        self.changes_started += 1
        self.ensemble_confirmed = False
        if can_add and (not can_remove or self.env.rng.random() < 0.5):
            name = self.spawn_replica()
            self.ensemble.append(name)
            if self.incarnation_of is not None:
                self.incarnations[name] = self.incarnation_of(name)
            self.change = EnsembleChange(term, name, self.env.now)
            self.env.log(f"{NAME} adds {name}: {self.ensemble}", "members added")
            self.env.send(NAME, leader_name, m.AddFollower(term, member_of(name)))
        else:
            name = self.env.rng.choice(sorted(set(self.ensemble) - {leader_name}))
            self.ensemble.remove(name)
            incarnation = self.incarnations.pop(name, None)
            self.change = EnsembleChange(term, name, self.env.now, incarnation)
            self.env.log(f"{NAME} removes {name}: {self.ensemble}", "members removed")
            self.env.send(NAME, leader_name, m.RemoveFollower(term, name))

    # -- answers -----------------------------------------------------------------------

    def receive(self, envelope: Envelope) -> None:
        body, src = envelope.body, envelope.src
        election = self.election
        if isinstance(body, m.NewTermResponse):
            if election is None or body.term != election.term or election.chosen is not None:
                return
            if src not in election.ensemble:
                return
            if not self.intact(src, body.incarnation):
                self.env.log(
                    f"{NAME}: {src} lost its data (incarnation {body.incarnation}, recorded "
                    f"{self.incarnations.get(src)}): its answer does not count",
                    "answers of members that lost their data",
                )
                return
            election.answers[src] = body.head
            election.incarnations[src] = body.incarnation
            if len(election.answers) * 2 > len(election.ensemble):
                self._elect(election)
        elif isinstance(body, m.BecomeLeaderResponse):
            if election is not None and body.term == election.term and src == election.chosen:
                self.leader = (body.term, src)
                self.ensemble_confirmed = election.ensemble == tuple(self.ensemble)
                self.election = None
                self.env.log(f"{NAME}: {src} leads term {body.term}", "leaders confirmed")
        elif isinstance(body, m.StatusResponse):
            request, leader = self.status_request, self.leader
            if request is None or body.request_id != request.request_id or leader is None:
                return
            self.status_request = None
            if (body.term, src) == leader:
                self._record_caught_up(body)
            if (
                (body.term, src) == leader
                and self.change is None
                and self.ensemble_confirmed
                and self.ready_for_change(body)
            ):
                self._change_ensemble(leader)
        elif isinstance(body, m.EnsembleChangeResponse):
            change = self.change
            if change is not None and (body.term, body.follower) == (change.term, change.follower):
                self.change = None
                self.ensemble_confirmed = True
        elif isinstance(body, m.Refused) and body.request == "ensemble change":
            # The leader kept a member it was asked to remove (the rest had not
            # caught up): it still counts, so it is a member again here too.
            change = self.change
            if (
                change is not None
                and change.term == body.term
                and change.follower not in self.ensemble
                and self.leader == (change.term, src)
            ):
                self.ensemble.append(change.follower)
                if change.incarnation is not None:
                    self.incarnations[change.follower] = change.incarnation
                self.change = None
                self.ensemble_confirmed = True

    def _record_caught_up(self, status: m.StatusResponse) -> None:
        """Members the leader counts as voters with another incarnation than
        recorded: it caught them up with that data."""
        for name, incarnation in status.incarnations:
            if name in self.ensemble and self.incarnations.get(name) != incarnation:
                self.env.log(
                    f"{NAME} records {name}'s data as caught up (incarnation {incarnation})",
                    "members caught up after losing their data",
                )
                self.incarnations[name] = incarnation

    def _elect(self, election: Election) -> None:
        chosen = self.choose_leader(election.answers)
        election.chosen = chosen
        for name, incarnation in election.incarnations.items():
            if incarnation:
                self.incarnations.setdefault(name, incarnation)
        names = [name for name in election.ensemble if name != chosen]
        followers = tuple(member_of(name) for name in names)
        incarnations = tuple(
            (name, self.incarnations[name]) for name in names if name in self.incarnations
        )
        self.env.log(f"{NAME} picks {chosen} for term {election.term} from {election.answers}")
        self.env.send(NAME, chosen, m.BecomeLeader(election.term, followers, incarnations))
