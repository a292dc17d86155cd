"""Deterministic simulation of one shard's replication (see STYLE.md, tests, item 3).

The whole shard runs in one process under one `random.Random(seed)`: replicas that
wrap the real pure replication core (`cairn.storage.core.replication`), a simulated
WAL that loses its unsynced tail on a crash (and everything, with the KV, when its
disk is lost), a network that drops, delays, duplicates, reorders and partitions,
a scripted controller, writing clients and readers, and checkers that assert
the safety invariants after every step (reads included: none returns a state
older than a write acknowledged before it began).

    world.py        the driver: one step = deliver due messages, inject faults, pump
    replica.py      a storage replica: coordination and follower side
    leading.py      the leader's runtime around LeaderCore and LeaderLease
    storage.py      the simulated WAL and KV, and entry application
    network.py      messages in flight, faults, partitions, stream sessions
    messages.py     the wire messages (mirrors proto/cairn/proto/replication.proto)
    context.py      what all nodes share (random source, clock, network) and the
                    runtime's rules (RuntimeRules)
    coordinator.py  the scripted controller: elections and ensemble changes
    clients.py      write requests, and a simple oracle of what they do (reads are
                    world.py's: a reader and the step the read began)
    observer.py     what happened, as the checkers need it
    checkers.py     the invariants
    mutants.py      deliberately broken variants, to show that the checkers bite
    scenario.py     scripted runs, for histories random search rarely reaches

Run long: uv run --frozen pytest tests/simulation --sim-seeds 500 --sim-steps 5000
(see conftest.py). A failure prints its seed and step, every replica's state and
the tail of the trace.
"""
