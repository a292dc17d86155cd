"""The controller's metrics, read from the cluster state it keeps (on the event loop,
once per scrape) and from its state keeper's counters.

Labels: `namespace` and `shard` (bounded by the cluster's shards), `node` (its
storage pods), `reason` (elections' reasons folded into a small fixed set).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from cairn.common.telemetry import LatencyCounter, LoopSnapshot, Telemetry
from cairn.controller.model import ClusterState, ElectionRecord, NodeHealth, ShardState
from cairn.controller.runtime import Controller

# Election reasons name nodes; metrics get what kind of election it was.
_REASON_KINDS = (
    ("first election", "first_election"),
    ("election interrupted", "interrupted"),
    ("leader moved to", "requested_move"),
    ("balance", "balance"),
    ("hand leadership off", "hand_off"),
    ("is unreachable", "leader_unreachable"),
    ("not leading", "leader_not_leading"),
    ("lost its replica", "leader_lost_replica"),
)


def reason_kind(reason: str) -> str:
    for text, kind in _REASON_KINDS:
        if text in reason:
            return kind
    return "other"


@dataclass
class ControllerSample:
    leading: bool
    state: ClusterState | None
    actions_in_flight: int
    write_latency: LatencyCounter | None
    conflicts: int
    elections: dict[str, int] = field(default_factory=dict)
    election_durations: dict[str, LatencyCounter] = field(default_factory=dict)


class ControllerMetrics:
    def __init__(
        self, telemetry: Telemetry, controller: Controller, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.controller = controller
        # Elections counted from the status' bounded history as it grows (this
        # process's view: a new controller starts from zero, as counters do).
        self._seen: set[tuple[int, int, str]] = set()
        # Every kind at 0 from the start: a series born at 1 hides its first
        # election from rate() and increase() (they need a sample before it).
        kinds = [kind for _, kind in _REASON_KINDS] + ["other"]
        self._elections: dict[str, int] = dict.fromkeys(kinds, 0)
        self._durations: dict[str, LatencyCounter] = {kind: LatencyCounter() for kind in kinds}
        self._snapshot = LoopSnapshot(self._take, loop)
        telemetry.before_collect(self._snapshot.invalidate)
        self._register(telemetry)

    def _count_elections(self, history: Iterable[ElectionRecord]) -> None:
        current = set()
        for record in history:
            key = (record.shard, record.term, record.leader)
            current.add(key)
            if key in self._seen:
                continue
            kind = reason_kind(record.reason)
            self._elections[kind] = self._elections.get(kind, 0) + 1
            self._durations.setdefault(kind, LatencyCounter()).record_ns(
                record.duration_ms * 1_000_000
            )
        self._seen = current  # bounded by the history's length

    def _take(self) -> ControllerSample:
        controller = self.controller
        keeper = controller.keeper
        state = keeper.state if keeper is not None else None
        if state is not None:
            self._count_elections(state.status.elections)
        return ControllerSample(
            leading=controller.leading.is_set(),
            state=state,
            actions_in_flight=len(controller._inflight),
            write_latency=keeper.write_latency if keeper is not None else None,
            conflicts=keeper.conflicts if keeper is not None else 0,
            elections=dict(self._elections),
            election_durations=dict(self._durations),
        )

    def _register(self, telemetry: Telemetry) -> None:
        meter = telemetry.meter
        observables: list[tuple[str, str, str, Callable[[ControllerSample], list[Observation]]]]
        observables = [
            (
                "cairn.controller.leader",
                "1",
                "1 while this controller holds the controller lock and reconciles",
                lambda c: [Observation(1 if c.leading else 0)],
            ),
            ("cairn.controller.shard.term", "{term}", "each shard's term", _terms),
            (
                "cairn.controller.shards.without_leader",
                "{shard}",
                "shards with no confirmed leader (new, or in an election)",
                _without_leader,
            ),
            (
                "cairn.controller.shards.under_replicated",
                "{shard}",
                "shards with fewer healthy members than their replication factor",
                _under_replicated,
            ),
            (
                "cairn.controller.node.health",
                "1",
                "1 for each storage pod's recorded health (healthy, unhealthy, unknown)",
                _node_health,
            ),
            (
                "cairn.controller.ensemble_changes.in_flight",
                "{shard}",
                "shards with a member being removed",
                _ensemble_changes,
            ),
            (
                "cairn.controller.actions.in_flight",
                "{action}",
                "planned actions being carried out",
                lambda c: [Observation(c.actions_in_flight)],
            ),
        ]
        for name, unit, description, read in observables:
            meter.create_observable_gauge(
                name, [self._observe(read)], unit=unit, description=description
            )
        meter.create_observable_counter(
            "cairn.controller.elections",
            [
                self._observe(
                    lambda c: [
                        Observation(count, {"reason": kind}) for kind, count in c.elections.items()
                    ]
                )
            ],
            unit="{election}",
            description="elections recorded since this controller started, by kind of reason",
        )
        meter.create_observable_counter(
            "cairn.controller.state.conflicts",
            [self._observe(lambda c: [Observation(c.conflicts)])],
            unit="{conflict}",
            description="cluster-state writes that lost a compare-and-set race (retried)",
        )
        telemetry.observe_histograms(
            "cairn.controller.election.duration",
            "s",
            "from fencing a shard to its new leader confirmed, by kind of reason",
            lambda: [
                ({"reason": kind}, counter)
                for kind, counter in self._snapshot.get().election_durations.items()
            ],
        )
        telemetry.observe_histograms(
            "cairn.controller.state.write.duration",
            "s",
            "cluster-state writes (status or spec, compare-and-set)",
            lambda: [
                ({}, counter)
                for counter in [self._snapshot.get().write_latency]
                if counter is not None
            ],
        )

    def _observe(
        self, read: Callable[[ControllerSample], list[Observation]]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(_: CallbackOptions) -> Iterable[Observation]:
            return read(self._snapshot.get())

        return callback


def _shard_labels(namespace: str, shard: int) -> dict[str, Any]:
    return {"namespace": namespace, "shard": shard}


def _terms(sample: ControllerSample) -> list[Observation]:
    if sample.state is None:
        return []
    return [
        Observation(record.term, _shard_labels(record.namespace, record.shard))
        for record in sample.state.status.shards
    ]


def _per_namespace(sample: ControllerSample, counted: Callable[..., bool]) -> list[Observation]:
    if sample.state is None:
        return []
    counts = {namespace.name: 0 for namespace in sample.state.spec.namespaces}
    health = {node.name: node.health for node in sample.state.status.nodes}
    factors = {n.name: n.replication_factor for n in sample.state.spec.namespaces}
    for record in sample.state.status.shards:
        if counted(record, health, factors.get(record.namespace, len(record.ensemble))):
            counts[record.namespace] = counts.get(record.namespace, 0) + 1
    return [Observation(count, {"namespace": name}) for name, count in counts.items()]


def _without_leader(sample: ControllerSample) -> list[Observation]:
    return _per_namespace(
        sample,
        lambda record, health, factor: (
            record.leader is None or record.state is not ShardState.STEADY
        ),
    )


def _under_replicated(sample: ControllerSample) -> list[Observation]:
    return _per_namespace(
        sample,
        lambda record, health, factor: (
            sum(1 for member in record.ensemble if health.get(member) is NodeHealth.HEALTHY)
            < factor
        ),
    )


def _ensemble_changes(sample: ControllerSample) -> list[Observation]:
    return _per_namespace(sample, lambda record, health, factor: bool(record.leaving))


def _node_health(sample: ControllerSample) -> list[Observation]:
    if sample.state is None:
        return []
    return [
        Observation(1, {"node": node.name, "health": node.health.value})
        for node in sample.state.status.nodes
    ]
