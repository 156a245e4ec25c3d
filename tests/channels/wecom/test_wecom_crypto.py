"""WeCom's callback crypto against the example in WeCom's own documentation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from channels.wecom.callback import MalformedCallback, encrypted_field, read_message
from channels.wecom.crypto import CryptoError, SignatureMismatch, WeComCrypto, aes_key, signature
from tests.fakes.wecom_server import DOC_CORP_ID, DOC_ENCODING_AES_KEY, DOC_TOKEN

# 加解密方案说明 / the samples shipped with WXBizMsgCrypt: a POST callback and a URL check.
DOC_POST_SIGNATURE = "477715d11cdb4164915debcba66cb864d751f3e6"
DOC_POST_TIMESTAMP, DOC_POST_NONCE = "1409659813", "1372623149"
DOC_POST_ENCRYPT = (
    "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3QczcdC"
    "Upj911L3vg3W/sYYvuJTs3TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kzJs8qLjvd4X"
    "gpue06DOdnLxAUHzM6+kDZ+HMZfJYuR+LtwGc2hgf5gsijff0ekUNXZiqATP7PF5mZxZ3Izoun1s4zG4LUMnvw2r+K"
    "qCKIw+3IQH03v+BCA9nMELNqbSf6tiWSrXJB3LAVGUcallcrw8V2t9EL4EhzJWrQUax5wLVMNS0+rUPA3k22Ncx4XX"
    "ZS9o0MBH27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVKn28H3KDYA5Pl/T8Z1ptDAVe0lXdQ2YoyyH2uyPIGHB"
    "ZZIs2pDBS8R07+qN+E7Q=="
)
DOC_POST_BODY = (
    f"<xml><ToUserName><![CDATA[{DOC_CORP_ID}]]></ToUserName>"
    f"<Encrypt><![CDATA[{DOC_POST_ENCRYPT}]]></Encrypt><AgentID><![CDATA[218]]></AgentID></xml>"
).encode()
DOC_VERIFY_SIGNATURE = "5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3"
DOC_VERIFY_TIMESTAMP, DOC_VERIFY_NONCE = "1409659589", "263014780"
DOC_ECHOSTR = (
    "P9nAzCzyDtyTWESHep1vC5X9xho/qYX3Zpb4yKa9SKld1DsH3Iyt3tP3zNdtp+4RPcs8TgAE7OaBO+FZXvnaqQ=="
)


@pytest.fixture
def crypto() -> WeComCrypto:
    return WeComCrypto(DOC_TOKEN, DOC_ENCODING_AES_KEY, DOC_CORP_ID)


def test_the_documented_callback_verifies_and_decrypts(crypto: WeComCrypto) -> None:
    encrypted = encrypted_field(DOC_POST_BODY)
    crypto.verify(DOC_POST_SIGNATURE, DOC_POST_TIMESTAMP, DOC_POST_NONCE, encrypted)
    message = read_message(crypto.decrypt(encrypted))
    assert (message.sender, message.msg_type, message.content) == ("mycreate", "text", "hello")
    assert message.msg_id == "4561255354251345929"
    assert message.agent_id == "218"
    assert message.create_time == 1409659813


def test_the_documented_callback_is_padded_past_16_bytes(crypto: WeComCrypto) -> None:
    """The case octos refuses: WeCom pads to 32-byte blocks, here with 30 bytes."""
    from base64 import b64decode

    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    key = aes_key(DOC_ENCODING_AES_KEY)
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    padded = decryptor.update(b64decode(DOC_POST_ENCRYPT)) + decryptor.finalize()
    assert padded[-1] == 30
    assert crypto.decrypt(DOC_POST_ENCRYPT).startswith(b"<xml>")


def test_the_documented_url_check_decrypts_to_its_echo(crypto: WeComCrypto) -> None:
    crypto.verify(DOC_VERIFY_SIGNATURE, DOC_VERIFY_TIMESTAMP, DOC_VERIFY_NONCE, DOC_ECHOSTR)
    assert crypto.decrypt(DOC_ECHOSTR) == b"1616140317555161061"


def test_a_signature_over_other_values_is_refused(crypto: WeComCrypto) -> None:
    with pytest.raises(SignatureMismatch):
        crypto.verify(DOC_POST_SIGNATURE, DOC_POST_TIMESTAMP, "1", DOC_POST_ENCRYPT)
    with pytest.raises(SignatureMismatch):
        crypto.verify("0" * 40, DOC_POST_TIMESTAMP, DOC_POST_NONCE, DOC_POST_ENCRYPT)
    assert signature(DOC_TOKEN, "b", "a", "c") == signature(DOC_TOKEN, "a", "c", "b")


def test_a_payload_for_another_corp_is_refused() -> None:
    other = WeComCrypto(DOC_TOKEN, DOC_ENCODING_AES_KEY, "ww_another_corp")
    with pytest.raises(CryptoError, match="another corp"):
        other.decrypt(DOC_POST_ENCRYPT)


def test_another_key_does_not_decrypt() -> None:
    other = WeComCrypto(DOC_TOKEN, "A" * 43, DOC_CORP_ID)
    with pytest.raises(CryptoError):
        other.decrypt(DOC_POST_ENCRYPT)


@pytest.mark.parametrize("length", range(0, 70, 7))
def test_encrypt_round_trips_every_padding_length(crypto: WeComCrypto, length: int) -> None:
    message = ("中" * length).encode()
    assert crypto.decrypt(crypto.encrypt(message)) == message


@pytest.mark.parametrize("garbage", ["not base64!", "", "QUJD"])
def test_garbage_is_a_crypto_error(crypto: WeComCrypto, garbage: str) -> None:
    with pytest.raises(CryptoError):
        crypto.decrypt(garbage)


def test_a_bad_key_is_an_error_not_a_zero_key() -> None:
    with pytest.raises(ValueError, match="bytes"):
        aes_key("QUJD")


@pytest.mark.parametrize(
    "xml",
    [
        b"<xml><Encrypt>",
        b"<xml></xml>",
        b'<!DOCTYPE x [<!ENTITY a "b">]><xml><Encrypt>&a;</Encrypt></xml>',
    ],
)
def test_malformed_envelopes_are_refused(xml: bytes) -> None:
    with pytest.raises(MalformedCallback):
        encrypted_field(xml)


@given(message=st.binary(max_size=300), prefix=st.binary(min_size=16, max_size=16))
def test_any_message_round_trips(message: bytes, prefix: bytes) -> None:
    crypto = WeComCrypto(DOC_TOKEN, DOC_ENCODING_AES_KEY, DOC_CORP_ID)
    assert crypto.decrypt(crypto.encrypt(message, random_prefix=prefix)) == message
