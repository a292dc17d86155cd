"""Sequence keys and GetSequenceUpdates through the real `oxia` client and raw gRPC."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import oxia
import oxia.ex
import pytest

from cairn.proto import oxia_client_pb2 as pb
from support.grpc_client import Router
from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e


def seq(*components: int) -> str:
    return "".join(f"-{n:020d}" for n in components)


class Drain:
    """Reads an oxia sequence-updates iterator on a thread."""

    def __init__(self, source: Iterator[str]) -> None:
        self.items: list[str] = []
        self._thread = threading.Thread(target=self._drain, args=(source,), daemon=True)
        self._thread.start()

    def _drain(self, source: Iterator[str]) -> None:
        for item in source:
            self.items.append(item)

    def wait_for(self, last: str, timeout_s: float = 10.0) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while (not self.items or self.items[-1] != last) and time.monotonic() < deadline:
            time.sleep(0.02)
        return list(self.items)

    def finished(self, timeout_s: float = 10.0) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


@pytest.mark.parametrize("shards", [1, 3, 10])
def test_generated_keys_and_updates(
    standalone_factory: Callable[..., StandaloneProcess], shards: int
) -> None:
    server = standalone_factory(shards)
    with oxia.Client(server.address) as client:
        updates = client.get_sequence_updates("/q/jobs", partition_key="p")
        drain = Drain(updates)
        keys = []
        for _ in range(5):
            key, version = client.put(
                "/q/jobs", b"job", partition_key="p", sequence_keys_deltas=[1]
            )
            assert version.modifications_count() == 0
            keys.append(key)
        assert keys == [f"/q/jobs{seq(i)}" for i in range(1, 6)]
        # each update is a new highest key, the last one is the latest (several may coalesce)
        seen = drain.wait_for(keys[-1])
        assert seen and seen[-1] == keys[-1]
        assert seen == sorted(set(seen)) and set(seen) <= set(keys)

        started = time.monotonic()
        updates.close()
        assert drain.finished()
        assert time.monotonic() - started < 5.0

        # stored like any record, on the partition key's shard
        assert client.get(keys[2], partition_key="p")[1] == b"job"
        assert client.list("/q/", "/q//", partition_key="p") == keys

        # a new subscriber gets the current highest key at once
        later = client.get_sequence_updates("/q/jobs", partition_key="p")
        late_drain = Drain(later)
        assert late_drain.wait_for(keys[-1]) == [keys[-1]]
        key, _ = client.put("/q/jobs", b"x", partition_key="p", sequence_keys_deltas=[3, 7])
        assert key == f"/q/jobs{seq(8, 7)}"
        assert late_drain.wait_for(key) == [keys[-1], key]
        later.close()
        assert late_drain.finished()

        # deleting the keys resets the counter
        client.delete_range("/q/jobs", "/q/jobt", partition_key="p")
        assert client.put("/q/jobs", b"", partition_key="p", sequence_keys_deltas=[1])[0] == (
            f"/q/jobs{seq(1)}"
        )
        # the client refuses what the server would refuse, and so does the server
        with pytest.raises(oxia.ex.InvalidOptions):
            client.put("/q/jobs", b"", sequence_keys_deltas=[1])
        client.put("/q/other", b"", partition_key="p", sequence_keys_deltas=[1, 1])
        with pytest.raises(oxia.ex.OxiaException):  # more components exist than deltas
            client.put("/q/other", b"", partition_key="p", sequence_keys_deltas=[1])


def test_updates_follow_each_prefix_separately_on_one_shard(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(1)
    with oxia.Client(server.address) as client:
        first = client.get_sequence_updates("/a", partition_key="p")
        second = client.get_sequence_updates("/a/b", partition_key="p")
        first_drain, second_drain = Drain(first), Drain(second)
        a1, _ = client.put("/a", b"", partition_key="p", sequence_keys_deltas=[1])
        ab1, _ = client.put("/a/b", b"", partition_key="p", sequence_keys_deltas=[1])
        a2, _ = client.put("/a", b"", partition_key="p", sequence_keys_deltas=[1])
        assert first_drain.wait_for(a2)[-1] == a2
        assert second_drain.wait_for(ab1) == [ab1]
        assert set(first_drain.items) <= {a1, a2}
        first.close()
        second.close()
        assert first_drain.finished() and second_drain.finished()


def _sequence_put(router: Router, shard: int) -> str:
    put = pb.PutRequest(key="/crash/seq", value=b"v", partition_key="p", sequence_key_delta=[1])
    response = router.stub.Write(pb.WriteRequest(shard=shard, puts=[put]), timeout=10)
    assert response.puts[0].status == pb.OK
    return str(response.puts[0].key)


def test_sequence_keys_never_go_backwards_after_kill_9(tmp_path: Path) -> None:
    rng = random.Random(7)
    server = StandaloneProcess(tmp_path / "data", shards=2)
    acked: list[str] = []
    try:
        for _ in range(4):
            server.start()
            with grpc.insecure_channel(server.address) as channel:
                router = Router(channel)
                shard = router.shard_for("p")
                # every acknowledged key survived, and the next one is above all of them
                listed = [
                    key
                    for chunk in router.stub.List(
                        pb.ListRequest(
                            shard=shard, start_inclusive="/crash/", end_exclusive="/crash//"
                        )
                    )
                    for key in chunk.keys
                ]
                assert set(acked) <= set(listed)
                first = _sequence_put(router, shard)
                assert all(first > key for key in listed)
                acked.append(first)
                stop = threading.Event()

                def writer(
                    router: Router = router, shard: int = shard, stop: threading.Event = stop
                ) -> None:
                    while not stop.is_set():
                        try:
                            acked.append(_sequence_put(router, shard))
                        except grpc.RpcError:
                            return  # the server died under us

                thread = threading.Thread(target=writer)
                thread.start()
                time.sleep(rng.uniform(0.2, 0.6))
                server.kill()
                stop.set()
                thread.join(timeout=30)
                assert not thread.is_alive()
        assert acked == sorted(set(acked)), "a sequence key went backwards or repeated"
        assert len(acked) > 20, "the load barely ran; the test would prove nothing"
    finally:
        server.kill()
