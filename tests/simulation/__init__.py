"""Deterministic simulation of the shipped code (see STYLE.md, tests, item 3, and
ARCHITECTURE.md section 7: what is simulated is what ships).

The whole cluster runs in one process under one `random.Random(seed)`: the
shipped controller (cairn.controller.runtime.Controller: its observer,
planner, executor and keeper) in two processes sharing a lease, and storage
pods running the shipped storage code (shard.py over ShardCore, the
replication sender and servicer, the lease, the coordination and health
services, node.py's replica lifecycle), each process on an asyncio loop on
simulated time, their disks simulated (a WAL that loses its unsynced tail on a
power loss, a KV with RocksDB's durability), talking gRPC through their real
handler tables over a simulated network. Faults: power losses (several pods at
once too), lost disks (within the fault model), cuts, isolated pods, long
lags, controller crashes and pauses past the lease, conflicting state writes,
operators (leader moves, replication factor changes, scaling), log trims and
snapshots. Clients write, read, and hold sessions and an ephemeral lock, as the
client API does. Checks after every step: one leader per term, on the pods and
across the controllers' calls; no acknowledged write lost; committed entries
agree; one state per applied offset; nothing applied past the durable offset;
reads fresh; an ephemeral lock never held by two live sessions; and liveness
once healed.

    managed_cluster.py   the cluster and its faults; PROFILES
    managed_profiles.py  targeted histories (issue 38's holes)
    managed_pod.py       a pod: the replica lifecycle (replicas.py) and the real
                         coordination, replication and health services; its
                         files (snapshots) on the simulated disk
    managed_controller.py  controller processes and their lease
    pod_checks.py        the invariants, on the pods' real state
    pod_clients.py       writes and reads as the client API makes them
    pod_lockers.py       sessions and an ephemeral lock
    script.py            scripted runs of the shipped pods (test_pod_scenarios.py)
    real_cluster.py      pods elected by a script, under random faults
    mutants.py           broken variants of the shipped code, to show the checks bite
    grpc_net.py, disk.py, virtual_loop.py   the simulated network, disks and time
    summary.py           what the seeds did, printed at the end of a session

Run long: uv run --frozen pytest tests/simulation --sim-seeds 500 --sim-steps 5000
(see conftest.py). A failure prints its seed and what broke.
"""
