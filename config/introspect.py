"""Walking the configuration models' type annotations.

Used to explain validation errors (which keys a mapping accepts, which field a location
names) and to list every key for the documentation. Our models use a small set of shapes:
models, lists, string-keyed dicts, Optional, Literal, and unions of models discriminated by
`type`; a union of other types (`str | int`) is a scalar with several accepted forms.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from config.problems import DataPath, PathPart

#: A type annotation as found on a model field (a class, a generic alias, a union...).
TypeHint = object


def strip_annotated(hint: TypeHint) -> TypeHint:
    while get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    return hint


def _union_members(hint: TypeHint) -> tuple[TypeHint, ...] | None:
    if get_origin(hint) in (Union, types.UnionType):
        return get_args(hint)
    return None


def strip_optional(hint: TypeHint) -> tuple[TypeHint, bool]:
    """The hint without Annotated wrappers and without `| None`, and whether None was there."""
    hint = strip_annotated(hint)
    members = _union_members(hint)
    if members is None or type(None) not in members:
        return hint, False
    rest = tuple(member for member in members if member is not type(None))
    if len(rest) == 1:
        return strip_annotated(rest[0]), True
    return Union[rest], True  # noqa: UP007 - rebuilding a union from a tuple of members


def is_model(hint: TypeHint) -> typing.TypeGuard[type[BaseModel]]:
    return isinstance(hint, type) and issubclass(hint, BaseModel)


def model_variants(hint: TypeHint) -> dict[str, type[BaseModel]] | None:
    """For a union of models told apart by `type`: each tag with its model."""
    members = _union_members(strip_annotated(hint))
    if members is None:
        return None
    variants: dict[str, type[BaseModel]] = {}
    for member in members:
        model = strip_annotated(member)
        if not is_model(model):
            return None
        tag = model.model_fields["type"].default if "type" in model.model_fields else None
        if not isinstance(tag, str):
            return None
        variants[tag] = model
    return variants


@dataclass(slots=True)
class Trace:
    """Where a pydantic error location lands in the YAML data and in the models."""

    #: The part of the location that exists in the data (keys and indexes, no tags).
    found: DataPath = ()
    #: The whole location as a YAML path: `found` plus keys that are missing from the data.
    path: DataPath = ()
    #: Variant tags crossed on the way (`telegram` in channels[0]), for messages.
    tags: list[str] = field(default_factory=list)
    #: The model and field the location ends in, when it ends in a known field.
    model: type[BaseModel] | None = None
    field_name: str | None = None
    field_info: FieldInfo | None = None
    #: The location went on into a scalar union's members (`str`, `int`): one error per form.
    into_union: bool = False
    #: When the location ends at a union of models: the `type` tags it accepts.
    variants: list[str] = field(default_factory=list)


def trace(root: type[BaseModel], loc: tuple[PathPart, ...], data: object) -> Trace:
    """Follow a pydantic error location through the models and the data side by side."""
    result = Trace()
    hint: TypeHint | None = root
    present = True
    for part in loc:
        if hint is not None:
            variants = model_variants(hint)
            if variants is not None:
                result.tags.append(str(part))
                hint = variants.get(str(part))
                continue
            hint, _ = strip_optional(hint)
            hint = _step_type(hint, part, result)
            if result.into_union:
                break
        result.path = (*result.path, part)
        if present:
            present, data = step_into(data, part)
            if present:
                result.found = result.path
    if hint is not None:
        result.variants = list(model_variants(hint) or {})
    return result


def _step_type(hint: TypeHint, part: PathPart, result: Trace) -> TypeHint | None:
    if is_model(hint):
        info = hint.model_fields.get(str(part))
        result.model, result.field_name, result.field_info = hint, str(part), info
        return info.annotation if info is not None else None
    origin = get_origin(hint)
    if origin is list:
        item: TypeHint = get_args(hint)[0]
        return item
    if origin is dict:
        value: TypeHint = get_args(hint)[1]
        return value
    if _union_members(hint) is not None:
        result.into_union = True
    return None


def step_into(data: object, part: PathPart) -> tuple[bool, object]:
    """One step into YAML data: whether `part` is there, and the value it leads to."""
    if isinstance(part, int) and isinstance(data, list) and 0 <= part < len(data):
        return True, data[part]
    if isinstance(part, str) and isinstance(data, dict) and part in data:
        return True, data[part]
    return False, None


def describe_type(hint: TypeHint) -> str:
    """The type as a user reads it: `integer`, `'polling' | 'webhook'`, `list of string`."""
    inner, optional = strip_optional(hint)
    text = _describe_plain(inner)
    return f"{text} or null" if optional else text


def _describe_plain(hint: TypeHint) -> str:
    names: dict[object, str] = {
        str: "string",
        int: "integer",
        float: "number",
        bool: "boolean",
        Path: "path",
        SecretStr: "secret string",
        object: "any",
        typing.Any: "any",
    }
    if hint in names:
        return names[hint]
    origin = get_origin(hint)
    if origin is Literal:
        return " | ".join(format_value(value) for value in get_args(hint))
    if origin is list:
        return f"list of {describe_type(get_args(hint)[0])}"
    if origin is dict:
        key, value = get_args(hint)
        return f"mapping of {describe_type(key)} to {describe_type(value)}"
    members = _union_members(hint)
    if members is not None:
        return " | ".join(_describe_plain(strip_annotated(member)) for member in members)
    if is_model(hint):
        return "mapping"
    return getattr(hint, "__name__", str(hint))


def format_value(value: object) -> str:
    """A default or an allowed value, written the way it would be written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, str | Path):
        return f"'{value}'"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, BaseModel):
        return "{...}"
    return json.dumps(value, default=str)


def field_default(info: FieldInfo) -> tuple[bool, object]:
    """Whether the field has a default, and that default (factories are called)."""
    if info.default is not PydanticUndefined:
        return True, info.default
    if info.default_factory is not None:
        return True, info.default_factory()  # type: ignore[call-arg]
    return False, None
