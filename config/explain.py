"""pydantic validation errors retold as `file:line: message; suggestion`.

A raw pydantic error says `channels.0.telegram.tokne: Extra inputs are not permitted`; a user
wants "unknown key 'tokne' in channels[0] (telegram); did you mean 'token'?" at the right line.
Input values are never quoted back except where they cannot be secrets (a `type` tag, a value
that should have been one of a few fixed words), since an interpolated token may be the input.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from dataclasses import dataclass

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_core import ErrorDetails

from config.introspect import (
    Trace,
    describe_type,
    field_default,
    format_value,
    step_into,
    trace,
)
from config.problems import ConfigProblem, ConfigValueError, DataPath, PathPart, format_path
from config.yaml_source import YamlDocument

#: What a value of each kind should have looked like, for "expected ..." messages.
_EXPECTED = {
    "string_type": "a string",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping of keys to values",
    "model_type": "a mapping of keys to values",
    "model_attributes_type": "a mapping of keys to values",
    "path_type": "a path",
}


@dataclass(frozen=True, slots=True)
class _Explained:
    path: DataPath
    message: str
    suggestion: str


def explain_validation_error(
    error: ValidationError,
    root: type[BaseModel],
    document: YamlDocument,
    skip_paths: Collection[DataPath] = (),
    secret_paths: Collection[DataPath] = (),
) -> list[ConfigProblem]:
    """One problem per error (errors of one scalar union merged), in line order.

    Errors at `skip_paths` are left out: those values already have a problem of their own
    (an unset environment variable), and their failed validation would only repeat it.
    Values at `secret_paths` (those that came from the environment) are never quoted.
    """
    explained: list[_Explained] = []
    union_forms: dict[DataPath, tuple[Trace, list[str]]] = {}
    for details in error.errors():
        loc = _with_validator_offset(details)
        where = trace(root, loc, document.data)
        if where.path in skip_paths:
            continue
        if where.into_union:
            if where.path not in union_forms:
                union_forms[where.path] = (where, [])
                explained.append(_Explained(where.path, "", ""))
            union_forms[where.path][1].append(_EXPECTED.get(details["type"], "another form"))
            continue
        explained.append(_explain(details, where, document.data, secret_paths))
    problems = []
    for item in explained:
        if item.path in union_forms:
            item = _union_problem(*union_forms[item.path])
        problems.append(
            ConfigProblem(document.file, document.line_of(item.path), item.message, item.suggestion)
        )
    return sorted(problems, key=lambda problem: problem.line or 0)


def _with_validator_offset(details: ErrorDetails) -> tuple[PathPart, ...]:
    raised = details.get("ctx", {}).get("error")
    offset = raised.at if isinstance(raised, ConfigValueError) else ()
    return (*details["loc"], *offset)


def _union_problem(where: Trace, forms: list[str]) -> _Explained:
    unique = list(dict.fromkeys(forms))
    return _Explained(
        where.path,
        f"{_subject(where)}: expected {' or '.join(unique)}",
        "quote text values: 'like this'",
    )


def _location(path: DataPath, tags: list[str]) -> str:
    text = format_path(path)
    if tags:
        text += f" ({', '.join(tags)})"
    return text


def _split_container(path: DataPath) -> tuple[DataPath, DataPath]:
    """Split `channels, 0, allow, 1` into the container `channels, 0` and key `allow, 1`."""
    for index in range(len(path) - 1, -1, -1):
        if isinstance(path[index], str):
            return path[:index], path[index:]
    return (), path


def _subject(where: Trace) -> str:
    container, key = _split_container(where.path)
    key_text = f"'{_location(key, [])}'"
    if not container:
        return key_text
    return f"{key_text} in {_location(container, where.tags)}"


def _container_text(where: Trace, container: DataPath) -> str:
    if not container:
        return "at the top level"
    return f"in {_location(container, where.tags)}"


#: For each bound pydantic checks, its `Field` keyword and how `_explain` words it.
_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}


def _explain(
    details: ErrorDetails, where: Trace, data: object, secret_paths: Collection[DataPath]
) -> _Explained:
    kind = details["type"]
    ctx = details.get("ctx", {})
    path = where.path
    if kind == "extra_forbidden":
        return _unknown_key(where)
    if kind == "missing":
        return _missing_key(where)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        quotable = (*where.path, "type") not in secret_paths
        return _bad_variant(kind, ctx, where, data, quotable)
    subject = _subject(where)
    if kind in _EXPECTED:
        expected = _EXPECTED[kind]
        advice = "write its keys indented under it" if "mapping" in expected else "correct it"
        return _Explained(path, f"{subject}: expected {expected}", _example(where, advice))
    if kind == "literal_error":
        given = details["input"] if where.path not in secret_paths else None
        return _not_one_of(where, ctx.get("expected", ""), given)
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return _Explained(
            path,
            f"{subject}: must be {words} {format_value(ctx[key])}",
            _example(where, "correct it"),
        )
    if kind in ("too_short", "string_too_short") and ctx.get("min_length") == 1:
        return _Explained(
            path, f"{subject}: is empty", "set a value (is its environment variable empty?)"
        )
    raised = ctx.get("error")
    if isinstance(raised, ConfigValueError):
        return _Explained(path, f"{subject}: {raised.message}", raised.suggestion)
    if kind == "value_error" and raised is not None:
        return _Explained(path, f"{subject}: {raised}", "correct the value")
    if kind == "string_pattern_mismatch":
        return _Explained(
            path,
            f"{subject}: does not have the expected form",
            _example(where, "see the description of this key"),
        )
    return _Explained(path, f"{subject}: {details['msg'].lower()}", "correct the value")


def _unknown_key(where: Trace) -> _Explained:
    container, key = _split_container(where.path)
    name = str(key[0]) if key else ""
    known = list(where.model.model_fields) if where.model is not None else []
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        suggestion = f"did you mean '{close[0]}'?"
    elif known:
        suggestion = "remove it; the keys allowed here are " + ", ".join(known)
    else:
        suggestion = "remove it"
    message = f"unknown key '{name}' {_container_text(where, container)}"
    return _Explained(where.path, message, suggestion)


def _missing_key(where: Trace) -> _Explained:
    container = where.path[:-1]
    name = str(where.path[-1]) if where.path else ""
    message = f"missing required key '{name}' {_container_text(where, container)}"
    info = where.field_info
    if info is not None and describe_type(info.annotation).startswith("secret"):
        variable = "_".join([*where.tags, name]).upper().replace("-", "_")
        suggestion = f"add '{name}: ${{{variable}}}' and set {variable} in the environment"
    elif info is not None:
        suggestion = f"add '{name}:' with a value ({describe_type(info.annotation)})"
    else:
        suggestion = f"add '{name}:'"
    return _Explained(where.path, message, suggestion)


def _bad_variant(
    kind: str, ctx: dict[str, object], where: Trace, data: object, quotable: bool
) -> _Explained:
    noun = "channel" if "channels" in where.path else str(where.path[0]) if where.path else ""
    known = where.variants
    value = _value_at(data, where.path)
    if not isinstance(value, dict):
        return _Explained(
            where.path,
            f"{_subject(where)}: expected a mapping with a 'type' key",
            f"write `type: {known[0]}` and the {noun}'s settings under it",
        )
    if kind == "union_tag_not_found":
        message = f"missing required key 'type' in {_location(where.path, [])}"
        return _Explained(where.path, message, f"set type to one of: {', '.join(known)}")
    tag = str(ctx.get("tag", ""))
    shown = f" '{tag}'" if quotable else ""
    message = f"unknown {noun} type{shown} in {_location(where.path, [])}"
    close = difflib.get_close_matches(tag, known, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return _Explained(where.path, message, f"{hint}known types: {', '.join(known)}")


def _not_one_of(where: Trace, expected: str, given: object) -> _Explained:
    choices = [choice.strip(" '") for choice in expected.replace(" or ", ", ").split(", ")]
    close = (
        difflib.get_close_matches(given, choices, n=1, cutoff=0.6) if isinstance(given, str) else []
    )
    hint = f"did you mean '{close[0]}'? " if close else ""
    shown = f" '{given}'" if isinstance(given, str) and len(given) <= 40 else ""
    return _Explained(
        where.path,
        f"{_subject(where)}: invalid value{shown}",
        f"{hint}use one of: {', '.join(choices)}",
    )


def _example(where: Trace, advice: str) -> str:
    """The field's default as an example when the error is at a field that has one."""
    info = where.field_info
    if info is None or where.path[-1:] != (where.field_name,):
        return advice
    has_default, default = field_default(info)
    if not has_default or default is None or isinstance(default, SecretStr | BaseModel):
        return advice
    return f"for example {format_value(default)} (the default)"


def _value_at(data: object, path: DataPath) -> object:
    for part in path:
        present, data = step_into(data, part)
        if not present:
            return None
    return data
