"""Feishu's event cipher and signature, with the example of Feishu's own documentation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels.feishu.webhook import DecryptError, FeishuCipher, signature, signature_matches

# 事件订阅 > 配置请求地址 > 示例: encrypt_key "test key" decrypts this to "hello world".
DOC_ENCRYPTED = "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk="


def test_the_documented_example_decrypts() -> None:
    assert FeishuCipher("test key").decrypt(DOC_ENCRYPTED) == b"hello world"


def test_another_key_does_not_decrypt_the_example() -> None:
    with pytest.raises(DecryptError):
        FeishuCipher("another key").decrypt(DOC_ENCRYPTED)


@pytest.mark.parametrize("plain", [b"", b"x", "飞书事件 🎉".encode(), b"y" * 16, b"z" * 100])
def test_encrypt_round_trips(plain: bytes) -> None:
    cipher = FeishuCipher("test key")
    assert cipher.decrypt(cipher.encrypt(plain)) == plain


def test_the_documented_example_is_reproduced_from_its_iv() -> None:
    from base64 import b64decode

    iv = b64decode(DOC_ENCRYPTED)[:16]
    assert FeishuCipher("test key").encrypt(b"hello world", iv=iv) == DOC_ENCRYPTED


@pytest.mark.parametrize("garbage", ["%%%", "", "QUJD", "QUJDREVGR0hJSktMTU5PUA=="])
def test_garbage_is_a_decrypt_error(garbage: str) -> None:
    with pytest.raises(DecryptError):
        FeishuCipher("test key").decrypt(garbage)


def test_the_signature_covers_timestamp_nonce_key_and_body() -> None:
    body = b'{"encrypt":"abc"}'
    good = signature("1700000000", "n0nce", "test key", body)
    assert signature_matches(good, "1700000000", "n0nce", "test key", body)
    assert signature_matches(good.upper(), "1700000000", "n0nce", "test key", body)
    for args in (
        ("1700000001", "n0nce", "test key", body),
        ("1700000000", "other", "test key", body),
        ("1700000000", "n0nce", "other key", body),
        ("1700000000", "n0nce", "test key", body + b" "),
    ):
        assert not signature_matches(good, *args)


@given(plain=st.binary(max_size=300), iv=st.binary(min_size=16, max_size=16))
def test_any_payload_round_trips(plain: bytes, iv: bytes) -> None:
    cipher = FeishuCipher("test key")
    assert cipher.decrypt(cipher.encrypt(plain, iv=iv)) == plain
