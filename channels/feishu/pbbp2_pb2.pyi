from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Header(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class Frame(_message.Message):
    __slots__ = ("SeqID", "LogID", "service", "method", "headers", "payload_encoding", "payload_type", "payload", "LogIDNew")
    SEQID_FIELD_NUMBER: _ClassVar[int]
    LOGID_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_ENCODING_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    LOGIDNEW_FIELD_NUMBER: _ClassVar[int]
    SeqID: int
    LogID: int
    service: int
    method: int
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    payload_encoding: str
    payload_type: str
    payload: bytes
    LogIDNew: str
    def __init__(self, SeqID: _Optional[int] = ..., LogID: _Optional[int] = ..., service: _Optional[int] = ..., method: _Optional[int] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., payload_encoding: _Optional[str] = ..., payload_type: _Optional[str] = ..., payload: _Optional[bytes] = ..., LogIDNew: _Optional[str] = ...) -> None: ...
