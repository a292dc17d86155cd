"""A standalone storage server's `/metrics`: promtool accepts it, and its shard
counters, offsets and latency histograms move with the load."""

from __future__ import annotations

from collections.abc import Callable

from cairn.client.sync import Client
from cairn.common.hashing import find_range, key_hash, split_hash_space
from support.processes import StandaloneProcess
from support.promtool import check_metrics, samples, scrape

METRICS_PREFIX = "cairn-storage metrics on http://"


def metrics_address(server: StandaloneProcess) -> str:
    """The address the server printed for its metrics (it prints it after its client
    address)."""
    line = server.wait_for(lambda text: text.startswith(METRICS_PREFIX), 30.0)
    return line[len(METRICS_PREFIX) :].strip().removesuffix("/metrics")


def shard_labels(shard: int) -> frozenset[tuple[str, str]]:
    return frozenset({("namespace", "default"), ("shard", str(shard))})


def test_storage_metrics_move_with_load(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    server = standalone_factory(2)
    address = metrics_address(server)
    before = scrape(address)
    check_metrics(before)
    key = "/metrics/a"
    shard = find_range(split_hash_space(2), key_hash(key))
    with Client(server.address) as client:
        for _ in range(3):
            client.put(key, b"value")
        client.get(key)
        client.get(key)
    after = scrape(address)
    check_metrics(after)
    labels = shard_labels(shard)

    def grew(name: str, by: float) -> None:
        was = samples(before, name).get(labels, 0.0)
        now = samples(after, name)[labels]
        assert now - was == by, (name, was, now)

    grew("cairn_shard_write_requests_total", 3)
    grew("cairn_shard_write_operations_total", 3)
    grew("cairn_shard_read_requests_total", 2)
    grew("cairn_shard_write_duration_seconds_count", 3)
    grew("cairn_shard_read_duration_seconds_count", 2)
    assert samples(after, "cairn_read_cache_hits_total")[labels] >= 1
    assert samples(after, "cairn_shard_commit_offset")[labels] >= 2
    assert samples(after, "cairn_wal_sync_duration_seconds_count")[labels] >= 1
    assert samples(after, "cairn_shard_role")[labels | {("role", "leader")}] == 1
    assert samples(after, "cairn_rocksdb_size_bytes")[labels | {("kind", "memtable")}] > 0
    calls = samples(after, "rpc_server_call_duration_seconds_count")
    # (The client writes over WriteStream, counted per request in the shard's
    # write duration; its gets are Read calls.)
    assert any(("rpc_method", "Read") in key and value >= 2 for key, value in calls.items())
    for name in ("process_cpu_time_seconds_total", "cairn_process_event_loop_lag_seconds_count"):
        assert samples(after, name), name
    # Each request on the client's WriteStream, and the WAL appends of the entries.
    streamed = samples(after, "cairn_rpc_server_stream_request_duration_seconds_count")
    assert any(("rpc_method", "WriteStream") in k and v >= 3 for k, v in streamed.items())
    assert samples(after, "cairn_wal_append_duration_seconds_count")[labels] >= 1
    # Series that exist before their first event: no subscriber, no snapshot sent.
    assert samples(after, "cairn_notification_subscribers")[labels] == 0
    assert samples(after, "cairn_snapshot_sent_total")[labels] == 0
    assert (
        samples(after, "cairn_requests_rejected_total")[frozenset({("reason", "OVERLOADED")})] == 0
    )
    (available,) = samples(after, "cairn_disk_available_bytes").values()
    (capacity,) = samples(after, "cairn_disk_capacity_bytes").values()
    assert 0 < available <= capacity

    with Client(server.address) as client:
        client.put("/metrics/ephemeral", b"value", ephemeral=True)
        with_session = scrape(address)
    assert sum(samples(with_session, "cairn_session_created_total").values()) == 1
    assert sum(samples(with_session, "cairn_session_active").values()) == 1


def test_rejected_requests_are_counted_by_reason(
    standalone_factory: Callable[..., StandaloneProcess],
) -> None:
    import grpc

    from cairn.proto import oxia_client_pb2 as pb

    server = standalone_factory(1)
    address = metrics_address(server)
    with grpc.insecure_channel(server.address) as channel:
        write = channel.unary_unary(
            "/io.oxia.proto.v1.OxiaClient/Write",
            request_serializer=pb.WriteRequest.SerializeToString,
            response_deserializer=pb.WriteResponse.FromString,
        )
        try:
            write(pb.WriteRequest(shard=99, puts=[pb.PutRequest(key="/x", value=b"v")]))
        except grpc.RpcError:
            pass
        else:
            raise AssertionError("a write to an unknown shard was accepted")
    text = scrape(address)
    check_metrics(text)
    rejected = samples(text, "cairn_requests_rejected_total")
    assert sum(rejected.values()) >= 1, rejected
