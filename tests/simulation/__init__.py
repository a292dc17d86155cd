"""Deterministic simulation of one shard under the real controller (see STYLE.md,
tests, item 3, and ARCHITECTURE.md section 7: what is simulated is what ships).

The whole cluster runs in one process under one `random.Random(seed)`:
- storage pods whose replica of the shard wraps the real pure cores (the
  replica's `ShardCore`: terms, commit, apply limit, takeover, timestamps,
  backpressure; the leader's `LeaderCore` and `LeaderLease`; issue 45 has the
  storage pod's driver itself run here next) over a simulated WAL that loses its unsynced
  tail on a crash (and everything, with the KV and the controller epoch it kept,
  when its disk is lost); pods beyond the ensemble start without a replica;
- the real controller: the real planner (`plan`), executor (with `steps.py` and
  `choose_leader`) and `StateKeeper`, run on a virtual-time asyncio loop, over
  the in-memory cluster-state store (versioned compare-and-set, with conflicts
  injected as another writer would cause them), calling the pods and observing
  them through the simulated network; two controller processes, one of which
  may be paused past its lease and resumed (the controller epoch must fence it);
- operators: leader moves, replication factor changes (n -> n-1 -> n+1 -> n),
  scale-in and back out of the storage pods (members drained, added, removed);
- a network that drops, delays, duplicates, reorders and partitions; crashes,
  power losses, lost disks, long lags;
- writing clients and readers, and checkers that assert the safety invariants
  after every step: one leader per term (on the pods, and (g) across every
  controller's claims), no acknowledged write lost, replicas agreeing on
  committed entries and states, and reads no older than a write acknowledged
  before they began.

    world.py        the driver: one step = deliver due messages, inject faults, pump
    replica.py      a storage pod's replica around ShardCore: coordination and
                    follower side
    leading.py      the leader's runtime around LeaderCore and LeaderLease
    storage.py      the simulated WAL and KV, and entry application
    network.py      messages in flight, faults, partitions, stream sessions
    messages.py     the wire messages (mirrors proto/cairn/proto/replication.proto)
    context.py      what all nodes share (random source, clock, network) and the
                    runtime's rules (RuntimeRules)
    controller.py   the real controller under simulation: the virtual-time loop,
                    pod calls and observations over the simulated network, the
                    reconcile loop, two controller processes, operators
    coordinator.py  a scripted controller, only for scripted scenarios (they elect
                    exactly whom they name, when they say)
    clients.py      write requests, and a simple oracle of what they do (reads are
                    world.py's: a reader and the step the read began)
    observer.py     what happened, as the checkers need it
    checkers.py     the invariants
    mutants.py      deliberately broken variants (of the runtime's rules, the
                    leader core, and the real controller's code), to show that the
                    checkers bite
    scenario.py     scripted runs, for histories random search rarely reaches

The shipped code, on simulated pods (the runtime above is to go, issue 45):

    managed_cluster.py   the shipped controller (runtime.Controller) and storage
                         pods together: elections, replacements, operators,
                         controller pauses, lost disks; managed_profiles.py adds
                         the targeted histories
    managed_pod.py       a pod: node.py's replica lifecycle (replicas.py) and the
                         real coordination, replication and health services
    managed_controller.py  controller processes and their lease
    pod_checks.py        the invariants, on the pods' real state
    pod_clients.py       writes and reads as the client API makes them
    script.py            scripted runs of the shipped pods (test_pod_scenarios.py)
    real_cluster.py      pods elected by a script, under random faults
    grpc_net.py, disk.py, virtual_loop.py   the simulated network, disks and time

Run long: uv run --frozen pytest tests/simulation --sim-seeds 500 --sim-steps 5000
(see conftest.py). A failure prints its seed and step, every replica's state and
the tail of the trace.
"""
