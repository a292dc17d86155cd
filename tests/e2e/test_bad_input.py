"""Bad input gets a clear gRPC error with a reason, and never damages stored data."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cairn.proto import oxia_client_pb2 as pb
from cairn.proto import oxia_client_pb2_grpc as pb_grpc
from cairn.storage.config import Limits
from support.processes import StandaloneProcess

pytestmark = pytest.mark.e2e
LIMITS = Limits()


@pytest.fixture
def channel(standalone_factory: Callable[..., StandaloneProcess]) -> Iterator[grpc.Channel]:
    server = standalone_factory(2)
    with grpc.insecure_channel(
        server.address, options=[("grpc.max_send_message_length", 256 * 1024 * 1024)]
    ) as opened:
        yield opened


@pytest.fixture
def stub(channel: grpc.Channel) -> pb_grpc.OxiaClientStub:
    return pb_grpc.OxiaClientStub(channel)


def error_of(call: Callable[[], object]) -> tuple[grpc.StatusCode, str, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    error = raised.value
    assert isinstance(error, grpc.Call)
    status = rpc_status.from_call(error)
    assert status is not None, "no google.rpc.Status detail"
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.domain == "oxia.io"
    return error.code(), info.reason, error.details() or ""


def put_one(
    stub: pb_grpc.OxiaClientStub, key: str, value: bytes, shard: int = 0
) -> pb.WriteResponse:
    response: pb.WriteResponse = stub.Write(
        pb.WriteRequest(shard=shard, puts=[pb.PutRequest(key=key, value=value)])
    )
    return response


def get_value(stub: pb_grpc.OxiaClientStub, key: str, shard: int = 0) -> bytes | None:
    result = next(
        stub.Read(pb.ReadRequest(shard=shard, gets=[pb.GetRequest(key=key, include_value=True)]))
    ).gets[0]
    return result.value if result.status == pb.OK else None


def test_oversized_key_value_and_request_are_refused_whole(stub: pb_grpc.OxiaClientStub) -> None:
    put_one(stub, "/kept", b"original")
    big_key = "k" * (LIMITS.max_key_bytes + 1)
    code, reason, message = error_of(lambda: put_one(stub, big_key, b"x"))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_TOO_LARGE")
    assert "key" in message and str(LIMITS.max_key_bytes) in message

    big_value = b"v" * (LIMITS.max_value_bytes + 1)
    mixed = pb.WriteRequest(
        shard=0,
        puts=[
            pb.PutRequest(key="/kept", value=b"overwritten"),
            pb.PutRequest(key="/big", value=big_value),
        ],
    )
    code, reason, _ = error_of(lambda: stub.Write(mixed))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_TOO_LARGE")
    # The whole request was refused: its valid put did not happen either.
    assert get_value(stub, "/kept") == b"original"
    assert get_value(stub, "/big") is None

    many = pb.WriteRequest(
        shard=0,
        deletes=[
            pb.DeleteRequest(key=f"/d{i}") for i in range(LIMITS.max_operations_per_request + 1)
        ],
    )
    code, reason, message = error_of(lambda: stub.Write(many))
    assert reason == "REQUEST_TOO_LARGE" and "operations" in message

    # Still serving, data intact.
    assert put_one(stub, "/after", b"ok").puts[0].status == pb.OK
    assert get_value(stub, "/kept") == b"original"


def test_message_over_the_transport_limit_is_refused(stub: pb_grpc.OxiaClientStub) -> None:
    huge = pb.WriteRequest(
        shard=0,
        puts=[pb.PutRequest(key=f"/h{i}", value=b"x" * (4 * 1024 * 1024)) for i in range(17)],
    )
    with pytest.raises(grpc.RpcError) as raised:
        stub.Write(huge)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    assert get_value(stub, "/h0") is None


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x12\xff\xff\x03abc",  # puts (field 2) with a length far past the end
        b"\x12\x03\x0a\x05ab",  # a put whose key runs past its own length
        b"\x12\x04\x0a\x02\xff\xfe",  # a key that is not UTF-8
        b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # not even a tag
    ],
)
def test_malformed_bytes_are_refused(
    channel: grpc.Channel, stub: pb_grpc.OxiaClientStub, garbage: bytes
) -> None:
    put_one(stub, "/kept", b"original")
    for service in ("io.oxia.proto.v1.OxiaClient", "io.streamnative.oxia.proto.OxiaClient"):
        write_raw = channel.unary_unary(f"/{service}/Write")
        code, reason, message = error_of(lambda write_raw=write_raw: write_raw(garbage))
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
        assert "malformed" in message
    assert get_value(stub, "/kept") == b"original"


def test_unknown_shard_and_namespace(stub: pb_grpc.OxiaClientStub) -> None:
    code, reason, message = error_of(lambda: put_one(stub, "/x", b"x", shard=99))
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "SHARD_NOT_FOUND")
    assert "99" in message
    code, reason, _ = error_of(
        lambda: next(stub.Read(pb.ReadRequest(shard=99, gets=[pb.GetRequest(key="/x")])))
    )
    assert reason == "SHARD_NOT_FOUND"
    code, reason, _ = error_of(
        lambda: next(stub.GetShardAssignments(pb.ShardAssignmentsRequest(namespace="nope")))
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "NAMESPACE_NOT_FOUND")
    code, reason, message = error_of(
        lambda: stub.Write(pb.WriteRequest(puts=[pb.PutRequest(key="/x")]))
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert "shard" in message


def test_unsupported_features_are_refused_not_ignored(stub: pb_grpc.OxiaClientStub) -> None:
    put = pb.PutRequest(key="/s", value=b"x", override_version_id=5)
    code, reason, message = error_of(lambda: stub.Write(pb.WriteRequest(shard=0, puts=[put])))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert "not supported" in message
    assert get_value(stub, "/s") is None


def test_sequence_puts_break_no_rule_silently(stub: pb_grpc.OxiaClientStub) -> None:
    for put, words in (
        (pb.PutRequest(key="/s", value=b"x", sequence_key_delta=[1]), "partition key"),
        (pb.PutRequest(key="/s", partition_key="p", sequence_key_delta=[0]), "greater than 0"),
        (
            pb.PutRequest(
                key="/s", partition_key="p", sequence_key_delta=[1], expected_version_id=-1
            ),
            "expected version",
        ),
        (pb.PutRequest(key="/s", secondary_indexes=[pb.SecondaryIndex()]), "needs a name"),
    ):
        code, reason, message = error_of(
            lambda put=put: stub.Write(pb.WriteRequest(shard=0, puts=[put]))
        )
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
        assert words in message
    listed = stub.List(pb.ListRequest(shard=0, start_inclusive="", end_exclusive="~/~/~"))
    assert [key for response in listed for key in response.keys] == []
