from cairn.proto import oxia_client_pb2 as _oxia_client_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicaRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NOT_MEMBER: _ClassVar[ReplicaRole]
    FENCED: _ClassVar[ReplicaRole]
    FOLLOWER: _ClassVar[ReplicaRole]
    LEADER: _ClassVar[ReplicaRole]
NOT_MEMBER: ReplicaRole
FENCED: ReplicaRole
FOLLOWER: ReplicaRole
LEADER: ReplicaRole

class EntryId(_message.Message):
    __slots__ = ("term", "offset")
    TERM_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    term: int
    offset: int
    def __init__(self, term: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("public_address", "internal_address")
    PUBLIC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    public_address: str
    internal_address: str
    def __init__(self, public_address: _Optional[str] = ..., internal_address: _Optional[str] = ...) -> None: ...

class ShardSpec(_message.Message):
    __slots__ = ("namespace", "key_sorting", "notifications_disabled")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_SORTING_FIELD_NUMBER: _ClassVar[int]
    NOTIFICATIONS_DISABLED_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key_sorting: _oxia_client_pb2.KeySorting
    notifications_disabled: bool
    def __init__(self, namespace: _Optional[str] = ..., key_sorting: _Optional[_Union[_oxia_client_pb2.KeySorting, str]] = ..., notifications_disabled: _Optional[bool] = ...) -> None: ...

class TermStart(_message.Message):
    __slots__ = ("term", "first_offset")
    TERM_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    term: int
    first_offset: int
    def __init__(self, term: _Optional[int] = ..., first_offset: _Optional[int] = ...) -> None: ...

class GetStateDigestRequest(_message.Message):
    __slots__ = ("shard", "offset", "timeout_ms")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    offset: int
    timeout_ms: int
    def __init__(self, shard: _Optional[int] = ..., offset: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class GetStateDigestResponse(_message.Message):
    __slots__ = ("shard", "offset", "records", "sha256", "node")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    shard: int
    offset: int
    records: int
    sha256: bytes
    node: Node
    def __init__(self, shard: _Optional[int] = ..., offset: _Optional[int] = ..., records: _Optional[int] = ..., sha256: _Optional[bytes] = ..., node: _Optional[_Union[Node, _Mapping]] = ...) -> None: ...

class NewTermRequest(_message.Message):
    __slots__ = ("shard", "term", "spec", "controller_epoch")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    shard: int
    term: int
    spec: ShardSpec
    controller_epoch: int
    def __init__(self, shard: _Optional[int] = ..., term: _Optional[int] = ..., spec: _Optional[_Union[ShardSpec, _Mapping]] = ..., controller_epoch: _Optional[int] = ...) -> None: ...

class NewTermResponse(_message.Message):
    __slots__ = ("head", "commit_offset", "incarnation")
    HEAD_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    head: EntryId
    commit_offset: int
    incarnation: int
    def __init__(self, head: _Optional[_Union[EntryId, _Mapping]] = ..., commit_offset: _Optional[int] = ..., incarnation: _Optional[int] = ...) -> None: ...

class BecomeLeaderRequest(_message.Message):
    __slots__ = ("shard", "term", "leader", "followers", "controller_epoch", "follower_incarnations")
    class FollowerIncarnationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SHARD_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    FOLLOWERS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FOLLOWER_INCARNATIONS_FIELD_NUMBER: _ClassVar[int]
    shard: int
    term: int
    leader: Node
    followers: _containers.RepeatedCompositeFieldContainer[Node]
    controller_epoch: int
    follower_incarnations: _containers.ScalarMap[str, int]
    def __init__(self, shard: _Optional[int] = ..., term: _Optional[int] = ..., leader: _Optional[_Union[Node, _Mapping]] = ..., followers: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., controller_epoch: _Optional[int] = ..., follower_incarnations: _Optional[_Mapping[str, int]] = ...) -> None: ...

class BecomeLeaderResponse(_message.Message):
    __slots__ = ("term_start",)
    TERM_START_FIELD_NUMBER: _ClassVar[int]
    term_start: EntryId
    def __init__(self, term_start: _Optional[_Union[EntryId, _Mapping]] = ...) -> None: ...

class AddFollowerRequest(_message.Message):
    __slots__ = ("shard", "term", "follower", "controller_epoch")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    FOLLOWER_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    shard: int
    term: int
    follower: Node
    controller_epoch: int
    def __init__(self, shard: _Optional[int] = ..., term: _Optional[int] = ..., follower: _Optional[_Union[Node, _Mapping]] = ..., controller_epoch: _Optional[int] = ...) -> None: ...

class AddFollowerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RemoveFollowerRequest(_message.Message):
    __slots__ = ("shard", "term", "follower_internal_address", "controller_epoch")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    FOLLOWER_INTERNAL_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    shard: int
    term: int
    follower_internal_address: str
    controller_epoch: int
    def __init__(self, shard: _Optional[int] = ..., term: _Optional[int] = ..., follower_internal_address: _Optional[str] = ..., controller_epoch: _Optional[int] = ...) -> None: ...

class RemoveFollowerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ("shard",)
    SHARD_FIELD_NUMBER: _ClassVar[int]
    shard: int
    def __init__(self, shard: _Optional[int] = ...) -> None: ...

class FollowerStatus(_message.Message):
    __slots__ = ("node", "acked_offset", "voting", "state", "applied_offset", "incarnation")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ACKED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    VOTING_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    node: Node
    acked_offset: int
    voting: bool
    state: str
    applied_offset: int
    incarnation: int
    def __init__(self, node: _Optional[_Union[Node, _Mapping]] = ..., acked_offset: _Optional[int] = ..., voting: _Optional[bool] = ..., state: _Optional[str] = ..., applied_offset: _Optional[int] = ..., incarnation: _Optional[int] = ...) -> None: ...

class ShardStatus(_message.Message):
    __slots__ = ("shard", "spec", "role", "term", "head", "commit_offset", "first_offset", "leader", "followers", "durable_offset", "applied_offset", "write_requests", "write_operations", "read_requests", "read_gets", "entries_applied_from_leader_changes", "incarnation", "term_start_offset", "commit_term")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    FOLLOWERS_FIELD_NUMBER: _ClassVar[int]
    DURABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WRITE_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WRITE_OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    READ_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    READ_GETS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_APPLIED_FROM_LEADER_CHANGES_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    TERM_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TERM_FIELD_NUMBER: _ClassVar[int]
    shard: int
    spec: ShardSpec
    role: ReplicaRole
    term: int
    head: EntryId
    commit_offset: int
    first_offset: int
    leader: Node
    followers: _containers.RepeatedCompositeFieldContainer[FollowerStatus]
    durable_offset: int
    applied_offset: int
    write_requests: int
    write_operations: int
    read_requests: int
    read_gets: int
    entries_applied_from_leader_changes: int
    incarnation: int
    term_start_offset: int
    commit_term: int
    def __init__(self, shard: _Optional[int] = ..., spec: _Optional[_Union[ShardSpec, _Mapping]] = ..., role: _Optional[_Union[ReplicaRole, str]] = ..., term: _Optional[int] = ..., head: _Optional[_Union[EntryId, _Mapping]] = ..., commit_offset: _Optional[int] = ..., first_offset: _Optional[int] = ..., leader: _Optional[_Union[Node, _Mapping]] = ..., followers: _Optional[_Iterable[_Union[FollowerStatus, _Mapping]]] = ..., durable_offset: _Optional[int] = ..., applied_offset: _Optional[int] = ..., write_requests: _Optional[int] = ..., write_operations: _Optional[int] = ..., read_requests: _Optional[int] = ..., read_gets: _Optional[int] = ..., entries_applied_from_leader_changes: _Optional[int] = ..., incarnation: _Optional[int] = ..., term_start_offset: _Optional[int] = ..., commit_term: _Optional[int] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("shards", "node")
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    shards: _containers.RepeatedCompositeFieldContainer[ShardStatus]
    node: Node
    def __init__(self, shards: _Optional[_Iterable[_Union[ShardStatus, _Mapping]]] = ..., node: _Optional[_Union[Node, _Mapping]] = ...) -> None: ...

class DeleteShardRequest(_message.Message):
    __slots__ = ("shard", "term", "controller_epoch")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    shard: int
    term: int
    controller_epoch: int
    def __init__(self, shard: _Optional[int] = ..., term: _Optional[int] = ..., controller_epoch: _Optional[int] = ...) -> None: ...

class DeleteShardResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PushAssignmentsRequest(_message.Message):
    __slots__ = ("assignments", "version", "controller_epoch")
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    assignments: _oxia_client_pb2.ShardAssignments
    version: int
    controller_epoch: int
    def __init__(self, assignments: _Optional[_Union[_oxia_client_pb2.ShardAssignments, _Mapping]] = ..., version: _Optional[int] = ..., controller_epoch: _Optional[int] = ...) -> None: ...

class PushAssignmentsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TruncateRequest(_message.Message):
    __slots__ = ("shard", "term", "leader", "leader_terms", "leader_head")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_TERMS_FIELD_NUMBER: _ClassVar[int]
    LEADER_HEAD_FIELD_NUMBER: _ClassVar[int]
    shard: int
    term: int
    leader: Node
    leader_terms: _containers.RepeatedCompositeFieldContainer[TermStart]
    leader_head: EntryId
    def __init__(self, shard: _Optional[int] = ..., term: _Optional[int] = ..., leader: _Optional[_Union[Node, _Mapping]] = ..., leader_terms: _Optional[_Iterable[_Union[TermStart, _Mapping]]] = ..., leader_head: _Optional[_Union[EntryId, _Mapping]] = ...) -> None: ...

class TruncateResponse(_message.Message):
    __slots__ = ("head", "commit_offset", "first_offset", "incarnation")
    HEAD_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    head: EntryId
    commit_offset: int
    first_offset: int
    incarnation: int
    def __init__(self, head: _Optional[_Union[EntryId, _Mapping]] = ..., commit_offset: _Optional[int] = ..., first_offset: _Optional[int] = ..., incarnation: _Optional[int] = ...) -> None: ...

class LogEntry(_message.Message):
    __slots__ = ("term", "offset", "timestamp_ms", "payload")
    TERM_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    term: int
    offset: int
    timestamp_ms: int
    payload: bytes
    def __init__(self, term: _Optional[int] = ..., offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., payload: _Optional[bytes] = ...) -> None: ...

class ReplicateRequest(_message.Message):
    __slots__ = ("shard", "term", "entries", "commit_offset", "applied_changes", "leader_time_ms", "heartbeat", "traces")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    APPLIED_CHANGES_FIELD_NUMBER: _ClassVar[int]
    LEADER_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    TRACES_FIELD_NUMBER: _ClassVar[int]
    shard: int
    term: int
    entries: _containers.RepeatedCompositeFieldContainer[LogEntry]
    commit_offset: int
    applied_changes: _containers.RepeatedCompositeFieldContainer[AppliedChanges]
    leader_time_ms: int
    heartbeat: bool
    traces: _containers.RepeatedCompositeFieldContainer[TraceContext]
    def __init__(self, shard: _Optional[int] = ..., term: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[LogEntry, _Mapping]]] = ..., commit_offset: _Optional[int] = ..., applied_changes: _Optional[_Iterable[_Union[AppliedChanges, _Mapping]]] = ..., leader_time_ms: _Optional[int] = ..., heartbeat: _Optional[bool] = ..., traces: _Optional[_Iterable[_Union[TraceContext, _Mapping]]] = ...) -> None: ...

class TraceContext(_message.Message):
    __slots__ = ("fields",)
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.ScalarMap[str, str]
    def __init__(self, fields: _Optional[_Mapping[str, str]] = ...) -> None: ...

class AppliedChanges(_message.Message):
    __slots__ = ("first_offset", "last_offset", "last_term", "changes")
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_TERM_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    first_offset: int
    last_offset: int
    last_term: int
    changes: bytes
    def __init__(self, first_offset: _Optional[int] = ..., last_offset: _Optional[int] = ..., last_term: _Optional[int] = ..., changes: _Optional[bytes] = ...) -> None: ...

class ReplicateResponse(_message.Message):
    __slots__ = ("durable_offset", "applied_offset", "term", "leader_time_ms", "incarnation")
    DURABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    durable_offset: int
    applied_offset: int
    term: int
    leader_time_ms: int
    incarnation: int
    def __init__(self, durable_offset: _Optional[int] = ..., applied_offset: _Optional[int] = ..., term: _Optional[int] = ..., leader_time_ms: _Optional[int] = ..., incarnation: _Optional[int] = ...) -> None: ...

class SnapshotHeader(_message.Message):
    __slots__ = ("shard", "term", "leader", "last_included")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LAST_INCLUDED_FIELD_NUMBER: _ClassVar[int]
    shard: int
    term: int
    leader: Node
    last_included: EntryId
    def __init__(self, shard: _Optional[int] = ..., term: _Optional[int] = ..., leader: _Optional[_Union[Node, _Mapping]] = ..., last_included: _Optional[_Union[EntryId, _Mapping]] = ...) -> None: ...

class SnapshotRecord(_message.Message):
    __slots__ = ("column", "key", "value")
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    column: int
    key: bytes
    value: bytes
    def __init__(self, column: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ...) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("header", "records", "last", "record_count", "checksum")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    header: SnapshotHeader
    records: _containers.RepeatedCompositeFieldContainer[SnapshotRecord]
    last: bool
    record_count: int
    checksum: int
    def __init__(self, header: _Optional[_Union[SnapshotHeader, _Mapping]] = ..., records: _Optional[_Iterable[_Union[SnapshotRecord, _Mapping]]] = ..., last: _Optional[bool] = ..., record_count: _Optional[int] = ..., checksum: _Optional[int] = ...) -> None: ...

class SnapshotResponse(_message.Message):
    __slots__ = ("head",)
    HEAD_FIELD_NUMBER: _ClassVar[int]
    head: EntryId
    def __init__(self, head: _Optional[_Union[EntryId, _Mapping]] = ...) -> None: ...
