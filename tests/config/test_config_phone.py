"""The Twilio and WhatsApp channel models: required webhook secrets, phone number formats."""

from __future__ import annotations

import pytest

from config import TwilioConfig, WhatsAppConfig
from tests.support.config_files import WriteYaml, problems_of

SID = "AC" + "0" * 32


def twilio(**fields: object) -> TwilioConfig:
    base: dict[str, object] = {
        "account_sid": SID,
        "auth_token": "t",
        "from_number": "+14155550100",
        "public_url": "https://bot.example.com/twilio/sms",
    }
    return TwilioConfig.model_validate({**base, **fields})


def whatsapp(**fields: object) -> WhatsAppConfig:
    base: dict[str, object] = {
        "access_token": "a",
        "phone_number_id": "106540352242922",
        "app_secret": "s",
        "verify_token": "v",
    }
    return WhatsAppConfig.model_validate({**base, **fields})


def test_the_webhook_secrets_are_required_and_named(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "bot.yaml",
        f"""
        channels:
          - type: twilio
            account_sid: {SID}
            from_number: "+14155550100"
            public_url: https://bot.example.com/twilio/sms
          - type: whatsapp
            access_token: a
            phone_number_id: "1"
            verify_token: v
        """,
    )
    messages = [problem.message for problem in problems_of(path)]
    assert "missing required key 'auth_token' in channels[0] (twilio)" in messages
    assert "missing required key 'app_secret' in channels[1] (whatsapp)" in messages


def test_twilio_needs_exactly_one_sender_and_its_public_url() -> None:
    assert twilio().webhook_path == "/twilio/sms"
    assert twilio(from_number=None, messaging_service_sid="MG" + "a" * 32).from_number is None
    with pytest.raises(ValueError, match="exactly one"):
        twilio(from_number=None)
    with pytest.raises(ValueError, match="exactly one"):
        twilio(messaging_service_sid="MG" + "a" * 32)
    with pytest.raises(ValueError, match="public_url"):
        TwilioConfig.model_validate({"account_sid": SID, "auth_token": "t", "from_number": "+1555"})
    with pytest.raises(ValueError, match=r"E\.164"):
        twilio(from_number="4155550100")


def test_allow_lists_hold_numbers_in_each_platforms_form() -> None:
    assert twilio(allow=["+14155550123", "*"]).allow == ["+14155550123", "*"]
    with pytest.raises(ValueError, match=r"E\.164"):
        twilio(allow=["4155550123"])
    with pytest.raises(ValueError, match=r"E\.164"):
        twilio(allow=[14155550123])
    assert whatsapp(allow=["14155550123", 14155550124]).allow == ["14155550123", 14155550124]
    with pytest.raises(ValueError, match='without "\\+"'):
        whatsapp(allow=["+14155550123"])
