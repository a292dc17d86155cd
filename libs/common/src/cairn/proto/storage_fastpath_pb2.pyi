from cairn.proto import oxia_client_pb2 as _oxia_client_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

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
