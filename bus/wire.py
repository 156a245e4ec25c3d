"""Two kinds of wire model beyond `WireModel`: variants of a tagged union, and durable payloads.

`WireModel.to_json` leaves out every field at its default. That is right for optional data but
wrong for two fields a reader depends on: the `type` tag that says which variant a payload is,
and the `schema_version` that says how to read it. Both bases below always write their field.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from bus.errors import UnsupportedSchemaVersion
from bus.message import WireModel


def _put_first(name: str, value: object, data: Any) -> Any:
    """The serialised `data` with `name` first (always written, even when it is the default),
    so a reader sees what kind or version of payload it holds before anything else."""
    if isinstance(data, dict):
        return {name: value, **data}
    return data


class TaggedModel(WireModel):
    """One variant of a tagged union; subclasses narrow `type` to a `Literal` with a default."""

    type: str

    @model_serializer(mode="wrap")
    def _write_tag(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _put_first("type", self.type, handler(self))


class VersionedModel(WireModel):
    """A payload that outlives the process (on disk, across processes): it carries its version.

    A payload without `schema_version` is version 1. One newer than `SUPPORTED_SCHEMA_VERSION`
    raises `UnsupportedSchemaVersion` while parsing, before any other field is read, so new
    fields are never silently dropped and a changed shape never surfaces as a raw pydantic error.
    """

    SUPPORTED_SCHEMA_VERSION: ClassVar[int] = 1
    PAYLOAD_NAME: ClassVar[str] = "payload"

    schema_version: int = Field(default=1, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _refuse_future_versions(cls, data: Any) -> Any:
        if isinstance(data, dict):
            found = data.get("schema_version")
            if isinstance(found, int) and not isinstance(found, bool):
                cls._check_version(found)
        return data

    @model_validator(mode="after")
    def _refuse_coerced_future_versions(self) -> VersionedModel:
        # A version given as "2" is coerced to int only after the before-validator ran.
        self._check_version(self.schema_version)
        return self

    @model_serializer(mode="wrap")
    def _write_version(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _put_first("schema_version", self.schema_version, handler(self))

    @classmethod
    def _check_version(cls, found: int) -> None:
        if found > cls.SUPPORTED_SCHEMA_VERSION:
            raise UnsupportedSchemaVersion(cls.PAYLOAD_NAME, found, cls.SUPPORTED_SCHEMA_VERSION)

    def validate_schema_version(self) -> None:
        """Raise `UnsupportedSchemaVersion` if this payload is newer than this build reads.

        Parsing already checks; this is for objects built without validation (`model_construct`).
        """
        self._check_version(self.schema_version)
