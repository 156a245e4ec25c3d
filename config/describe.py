"""Every configuration key with its type and description, for the README's reference table."""

from __future__ import annotations

from typing import get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from config.gateway import GatewayConfig
from config.introspect import (
    TypeHint,
    describe_type,
    field_default,
    format_value,
    is_model,
    model_variants,
    strip_optional,
)
from config.profile import ProfileConfig

#: (dotted key, type text, description); lists are written `[]`, variants `.<type>.`:
#: `channels[].telegram.token`.
KeyDescription = tuple[str, str, str]


def describe_model_keys(model: type[BaseModel], prefix: str = "") -> list[KeyDescription]:
    """The keys of `model` and of everything nested in it, depth first, in field order."""
    rows: list[KeyDescription] = []
    # A variant's `type` comes first, as it does in a well-written YAML mapping.
    fields = sorted(model.model_fields.items(), key=lambda item: item[0] != "type")
    for name, info in fields:
        key = f"{prefix}{name}"
        rows.append((key, _type_text(info), info.description or ""))
        rows.extend(_nested_keys(info.annotation, key))
    return rows


def _nested_keys(hint: TypeHint, key: str) -> list[KeyDescription]:
    inner, _ = strip_optional(hint)
    variants = model_variants(inner)
    if variants is not None:
        rows: list[KeyDescription] = []
        for tag, variant in variants.items():
            rows.extend(describe_model_keys(variant, f"{key}.{tag}."))
        return rows
    if is_model(inner):
        return describe_model_keys(inner, f"{key}.")
    if get_origin(inner) is list:
        return _nested_keys(get_args(inner)[0], f"{key}[]")
    return []


def _type_text(info: FieldInfo) -> str:
    variants = model_variants(strip_optional(info.annotation)[0])
    if variants is not None:
        text = "mapping with type: " + " | ".join(variants)
    else:
        text = describe_type(info.annotation)
        item_variants = _list_item_variants(info.annotation)
        if item_variants is not None:
            text = "list of mappings with type: " + " | ".join(item_variants)
    has_default, default = field_default(info)
    if not has_default:
        return f"{text}, required"
    if isinstance(default, BaseModel):
        return text
    return f"{text}, default {format_value(default)}"


def _list_item_variants(hint: TypeHint) -> dict[str, type[BaseModel]] | None:
    inner, _ = strip_optional(hint)
    if get_origin(inner) is not list:
        return None
    return model_variants(get_args(inner)[0])


def describe_gateway_keys() -> list[KeyDescription]:
    """The keys of gateway.yaml."""
    return describe_model_keys(GatewayConfig)


def describe_profile_keys() -> list[KeyDescription]:
    """The keys of a profile file."""
    return describe_model_keys(ProfileConfig)


def describe_config_keys() -> list[KeyDescription]:
    """Every key of gateway.yaml, then every key of a profile file (no key is in both)."""
    return [*describe_gateway_keys(), *describe_profile_keys()]
