"""Key encoding and layout: reversible, injective, never a path outside the data directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bus import SessionKey
from sessions.layout import (
    HASH_SUFFIX_LEN,
    MAX_ENCODED_NAME,
    SessionLayout,
    bounded_name,
    decode_component,
    encode_component,
    fnv1a_64,
    is_cut_name,
    key_from_parts,
    topic_of_stem,
    topic_stem,
)

ROOT = Path("/srv/octos/data")
HOSTILE = st.sampled_from(
    ["../", "..", "/", "%", "%25", ".", "#", ":", "default", "Default", "", "\\", "a/../../b"]
)
TEXT = st.one_of(HOSTILE, st.text(max_size=40), st.text(min_size=150, max_size=400))
KEYS = st.builds(
    SessionKey,
    channel=st.one_of(st.sampled_from(["telegram", "discord", "api"]), TEXT),
    chat_id=TEXT,
    profile=st.one_of(st.none(), st.just("_main"), TEXT),
    topic_name=st.one_of(st.none(), TEXT),
)


def test_fnv1a_64_matches_the_reference_vectors() -> None:
    assert fnv1a_64(b"") == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64(b"foobar") == 0x85944171F73967E8


def test_encoding_keeps_only_safe_bytes_and_uses_uppercase_hex() -> None:
    assert encode_component("telegram:12345") == "telegram%3A12345"
    assert encode_component("a b/c#d_e-f") == "a%20b%2Fc%23d_e-f"
    assert encode_component("é") == "%C3%A9"
    assert encode_component("%") == "%25"


@given(st.text())
def test_encoding_round_trips(text: str) -> None:
    assert decode_component(encode_component(text)) == text


@given(st.text(), st.text())
def test_different_texts_encode_differently(first: str, second: str) -> None:
    if first != second:
        assert encode_component(first) != encode_component(second)


def test_long_names_are_cut_with_the_hash_of_the_whole_text() -> None:
    text = "telegram:" + "x" * 500
    name = bounded_name(text)
    assert len(name) == MAX_ENCODED_NAME + HASH_SUFFIX_LEN
    assert name.endswith(f"_{fnv1a_64(text.encode()):016X}")
    assert is_cut_name(name)
    assert bounded_name(text + "y") != name


def test_octos_legacy_file_names_are_reproduced() -> None:
    # Octos cuts at 183 encoded characters, whole escapes at a time, then appends the hash.
    key = "telegram:" + "é" * 100
    name = bounded_name(key)
    prefix = name[:-HASH_SUFFIX_LEN]
    assert prefix == ("telegram%3A" + "%C3%A9" * 100)[: len(prefix)]
    assert len(prefix) in range(MAX_ENCODED_NAME, MAX_ENCODED_NAME + 3)
    assert not is_cut_name(bounded_name("telegram:12345"))


@given(st.text(max_size=400))
def test_whole_names_and_cut_names_never_look_alike(text: str) -> None:
    name = bounded_name(text)
    assert is_cut_name(name) == (name != encode_component(text))
    if not is_cut_name(name):
        assert decode_component(name) == text


@given(KEYS)
def test_session_paths_stay_under_the_root(key: SessionKey) -> None:
    layout = SessionLayout(ROOT)
    for path in (layout.path_for(key), layout.legacy_path_for(key), layout.migration_marker(key)):
        assert os.path.normpath(path) == str(path)
        assert os.path.commonpath([ROOT, path]) == str(ROOT)
        assert all(len(part.encode()) <= 255 for part in path.parts)
    assert layout.path_for(key).parent.parent.parent == layout.users_dir


@given(KEYS, KEYS)
def test_distinct_keys_get_distinct_files(first: SessionKey, second: SessionKey) -> None:
    layout = SessionLayout(ROOT)
    same_session = (first.base_key(), first.topic()) == (second.base_key(), second.topic())
    assert (layout.path_for(first) == layout.path_for(second)) == same_session


def test_a_topic_named_default_is_not_the_default_session() -> None:
    layout = SessionLayout(ROOT)
    chat = SessionKey("telegram", "1")
    paths = {layout.path_for(chat.with_topic(t)) for t in (None, "default", "Default")}
    paths.add(layout.path_for(SessionKey("telegram", "1", None, "")))
    assert len(paths) == 4
    assert layout.path_for(chat).name == "default.jsonl"


@given(st.one_of(st.none(), st.text(max_size=60)))
def test_topic_stems_round_trip_unless_cut(topic: str | None) -> None:
    stem = topic_stem(topic)
    if is_cut_name(stem):
        with pytest.raises(ValueError, match="was cut"):
            topic_of_stem(stem)
    else:
        assert topic_of_stem(stem) == topic


def test_a_ten_thousand_character_key_gets_a_short_unique_path() -> None:
    layout = SessionLayout(ROOT)
    first = SessionKey("telegram", "../" * 3333 + "a", "_main", "/" * 100)
    second = SessionKey("telegram", "../" * 3333 + "b", "_main", "/" * 100)
    assert len(first.chat_id) == 10_000
    assert layout.path_for(first) != layout.path_for(second)
    assert layout.name_was_cut(first)
    assert os.path.commonpath([ROOT, layout.path_for(first)]) == str(ROOT)


@pytest.mark.parametrize(
    ("base", "topic", "expected"),
    [
        ("telegram:1", None, SessionKey("telegram", "1")),
        ("_main:telegram:1", "t", SessionKey("telegram", "1", "_main", "t")),
        ("discord:guild:123", None, SessionKey("discord", "guild:123")),
        ("telegram:a#b", None, SessionKey("telegram", "a#b")),
    ],
)
def test_keys_are_rebuilt_from_their_parts(
    base: str, topic: str | None, expected: SessionKey
) -> None:
    assert key_from_parts(base, topic) == expected


def _cut_by_the_rule(text: str, max_len: int) -> str:
    """octos' rule spelled out byte by byte: escapes added while shorter than `max_len`."""
    data = text.encode("utf-8", "surrogatepass")
    name = ""
    for byte in data:
        if len(name) >= max_len:
            return name + f"_{fnv1a_64(data):016X}"
        name += encode_component(bytes([byte]).decode("latin-1")) if byte < 0x80 else f"%{byte:02X}"
    return name


@given(st.text(max_size=120), st.integers(min_value=3, max_value=200))
def test_the_short_key_shortcut_cuts_exactly_as_the_rule(text: str, max_len: int) -> None:
    assert bounded_name(text, max_len) == _cut_by_the_rule(text, max_len)
