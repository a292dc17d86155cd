"""Acknowledged writes survive `kill -9` at random moments, with their versions.

Each writer thread owns a disjoint set of keys and writes them one request at
a time, so for every key we know the last acknowledged value and version and
the one request that may have been in flight when the process died. After each
restart every key must hold its last acknowledged value with exactly that
version, or the in-flight value (an unacknowledged write may or may not have
landed), and every value must be intact.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from cairn.proto import oxia_client_pb2 as pb
from support.grpc_client import Router
from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e

KILLS = 20
WRITERS = 4
KEYS_PER_WRITER = 40


def make_value(key: str, counter: int, rng: random.Random) -> bytes:
    body = f"{key}|{counter}|".encode() + rng.randbytes(rng.randint(0, 2000))
    return body + hashlib.sha256(body).hexdigest().encode()


def value_is_intact(key: str, value: bytes) -> bool:
    body, digest = value[:-64], value[-64:]
    return hashlib.sha256(body).hexdigest().encode() == digest and body.startswith(
        f"{key}|".encode()
    )


@dataclass
class KeyState:
    acked_value: bytes | None = None
    acked_version: int | None = None
    in_flight: set[bytes] = field(default_factory=set)


def run_writer(
    router: Router, writer: int, states: dict[str, KeyState], stop: threading.Event, seed: int
) -> int:
    rng = random.Random(seed)
    keys = [f"/crash/w{writer}/k{i:03d}" for i in range(KEYS_PER_WRITER)]
    counter = 0
    acked = 0
    while not stop.is_set():
        batch_keys = rng.sample(keys, rng.randint(1, 5))
        shard_groups: dict[int, list[str]] = {}
        for key in batch_keys:
            shard_groups.setdefault(router.shard_for(key), []).append(key)
        shard, group = next(iter(shard_groups.items()))
        values = {}
        for key in group:
            counter += 1
            values[key] = make_value(key, counter, rng)
            states[key].in_flight.add(values[key])
        request = pb.WriteRequest(
            shard=shard, puts=[pb.PutRequest(key=k, value=v) for k, v in values.items()]
        )
        try:
            response = router.stub.Write(request, timeout=10)
        except grpc.RpcError:
            return acked  # the server died under us; the in-flight values stay possible
        for put, key in zip(response.puts, group, strict=True):
            assert put.status == pb.OK
            state = states[key]
            state.acked_value = values[key]
            state.acked_version = put.version.version_id
            state.in_flight.clear()
            acked += 1
    return acked


def verify(router: Router, states: dict[str, KeyState]) -> None:
    for key, state in states.items():
        request = pb.ReadRequest(
            shard=router.shard_for(key), gets=[pb.GetRequest(key=key, include_value=True)]
        )
        result = next(router.stub.Read(request, timeout=10)).gets[0]
        if result.status == pb.KEY_NOT_FOUND:
            assert state.acked_value is None, f"{key}: acknowledged write lost"
            state.in_flight.clear()
            continue
        assert result.status == pb.OK
        assert value_is_intact(key, result.value), f"{key}: torn value"
        if result.value == state.acked_value:
            assert result.version.version_id == state.acked_version, f"{key}: version changed"
        else:
            assert result.value in state.in_flight, (
                f"{key}: holds neither the acknowledged nor an in-flight value"
            )
            # The unacknowledged write landed: it is now the value to keep.
            state.acked_value = result.value
            state.acked_version = result.version.version_id
        state.in_flight.clear()
    # Nothing else is stored (children of each writer's parent key, per shard).
    for shard in router.all_shards():
        listed = []
        for writer in range(WRITERS):
            parent = f"/crash/w{writer}/"
            request = pb.ListRequest(
                shard=shard, start_inclusive=parent, end_exclusive=parent + "/"
            )
            listed += [k for chunk in router.stub.List(request, timeout=10) for k in chunk.keys]
        expected = sorted(
            k
            for k, s in states.items()
            if s.acked_value is not None and router.shard_for(k) == shard
        )
        assert sorted(listed) == expected


def load_then_kill(
    server: StandaloneProcess, states: dict[str, KeyState], rng: random.Random
) -> int:
    """One round: start, check, write from several threads, kill -9 mid-load."""
    server.start()
    with grpc.insecure_channel(server.address) as channel:
        router = Router(channel)
        verify(router, states)
        stop = threading.Event()
        results: list[int] = []
        errors: list[BaseException] = []

        def writer(index: int, seed: int) -> None:
            try:
                results.append(run_writer(router, index, states, stop, seed))
            except BaseException as error:
                errors.append(error)

        threads = [
            threading.Thread(target=writer, args=(w, rng.randrange(1 << 30)))
            for w in range(WRITERS)
        ]
        for thread in threads:
            thread.start()
        time.sleep(rng.uniform(0.1, 1.2))
        server.kill()
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
            assert not thread.is_alive()
        assert not errors, errors
        return sum(results)


def test_acknowledged_writes_survive_kill_9(tmp_path: Path) -> None:
    rng = random.Random(20261121)
    server = StandaloneProcess(tmp_path / "data", shards=3)
    states = {
        f"/crash/w{w}/k{i:03d}": KeyState() for w in range(WRITERS) for i in range(KEYS_PER_WRITER)
    }
    try:
        total_acked = sum(load_then_kill(server, states, rng) for _ in range(KILLS))
        server.start()
        with grpc.insecure_channel(server.address) as channel:
            verify(Router(channel), states)
        assert server.stop() == 0
    finally:
        server.kill()
    assert total_acked > KILLS * 10, "the load barely ran; the test would prove nothing"
