from cairn.proto import oxia_client_pb2 as _oxia_client_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionCloseReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLOSED_BY_CLIENT: _ClassVar[SessionCloseReason]
    EXPIRED: _ClassVar[SessionCloseReason]
CLOSED_BY_CLIENT: SessionCloseReason
EXPIRED: SessionCloseReason

class NarrowWriteRequest(_message.Message):
    __slots__ = ("shard", "puts", "deletes", "delete_ranges")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    PUTS_FIELD_NUMBER: _ClassVar[int]
    DELETES_FIELD_NUMBER: _ClassVar[int]
    DELETE_RANGES_FIELD_NUMBER: _ClassVar[int]
    shard: int
    puts: _containers.RepeatedCompositeFieldContainer[NarrowPut]
    deletes: _containers.RepeatedCompositeFieldContainer[_oxia_client_pb2.DeleteRequest]
    delete_ranges: _containers.RepeatedCompositeFieldContainer[_oxia_client_pb2.DeleteRangeRequest]
    def __init__(self, shard: _Optional[int] = ..., puts: _Optional[_Iterable[_Union[NarrowPut, _Mapping]]] = ..., deletes: _Optional[_Iterable[_Union[_oxia_client_pb2.DeleteRequest, _Mapping]]] = ..., delete_ranges: _Optional[_Iterable[_Union[_oxia_client_pb2.DeleteRangeRequest, _Mapping]]] = ...) -> None: ...

class NarrowPut(_message.Message):
    __slots__ = ("key", "value", "expected_version_id")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    expected_version_id: int
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., expected_version_id: _Optional[int] = ...) -> None: ...

class FoldedWrites(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[_oxia_client_pb2.WriteRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[_oxia_client_pb2.WriteRequest, _Mapping]]] = ...) -> None: ...

class NarrowFoldedWrites(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[NarrowWriteRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[NarrowWriteRequest, _Mapping]]] = ...) -> None: ...

class CreateSessionEntry(_message.Message):
    __slots__ = ("timeout_ms", "client_identity", "owner")
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    timeout_ms: int
    client_identity: str
    owner: str
    def __init__(self, timeout_ms: _Optional[int] = ..., client_identity: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class CloseSessionEntry(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    reason: SessionCloseReason
    def __init__(self, session_id: _Optional[int] = ..., reason: _Optional[_Union[SessionCloseReason, str]] = ...) -> None: ...

class TermStartEntry(_message.Message):
    __slots__ = ("leader",)
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: str
    def __init__(self, leader: _Optional[str] = ...) -> None: ...

class SessionState(_message.Message):
    __slots__ = ("timeout_ms", "client_identity", "closing", "owner")
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    CLOSING_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    timeout_ms: int
    client_identity: str
    closing: bool
    owner: str
    def __init__(self, timeout_ms: _Optional[int] = ..., client_identity: _Optional[str] = ..., closing: _Optional[bool] = ..., owner: _Optional[str] = ...) -> None: ...
