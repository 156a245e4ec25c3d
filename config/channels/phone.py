"""Configuration of the two phone channels: Twilio SMS and the WhatsApp Cloud API.

Both receive by a signed webhook on the daemon's own HTTP server, so both secrets that sign the
webhook (`auth_token`, `app_secret`) are required, never optional. Allow lists name phone
numbers: E.164 (`+14155550100`) for SMS, the WhatsApp id (the number without `+`) for WhatsApp.
"""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from config.channels.base import ChannelConfigBase, allow_list_field, webhook_path_field
from config.common import AllowEntry, HttpUrlText, Secret, UrlPath
from config.problems import ConfigValueError

_E164 = re.compile(r"\+[1-9][0-9]{1,14}")
_WHATSAPP_ID = re.compile(r"[1-9][0-9]{1,14}")


class TwilioConfig(ChannelConfigBase):
    type: Literal["twilio"] = Field("twilio", description="Channel kind: Twilio SMS and MMS.")
    allow: list[AllowEntry] = allow_list_field(
        'Phone numbers (E.164, e.g. "+14155550100")', verb="text"
    )
    account_sid: str = Field(
        pattern=r"^AC[0-9a-fA-F]{32}$", description="Account SID (AC followed by 32 hex digits)."
    )
    auth_token: Secret = Field(
        description="Auth token: signs the API calls and verifies X-Twilio-Signature."
    )
    from_number: str | None = Field(
        None, description="The Twilio number replies are sent from (E.164)."
    )
    messaging_service_sid: str | None = Field(
        None,
        pattern=r"^MG[0-9a-fA-F]{32}$",
        description="Messaging Service that sends replies (MG...), instead of from_number.",
    )
    public_url: HttpUrlText = Field(
        description="The exact URL Twilio posts to, as set on the number: the signature covers "
        "it, and behind a proxy the daemon cannot guess it."
    )
    webhook_path: UrlPath = webhook_path_field("/twilio/sms", "Twilio's webhooks")
    api_base_url: HttpUrlText = Field(
        "https://api.twilio.com", description="Twilio REST API base URL."
    )
    stranger_notice: bool = Field(
        True,
        description="Text an unknown number its id once an hour (each SMS costs money); false "
        "ignores strangers silently.",
    )

    @field_validator("from_number")
    @classmethod
    def _e164_sender(cls, value: str | None) -> str | None:
        if value is not None and not _E164.fullmatch(value):
            raise ConfigValueError(
                "must be an E.164 phone number", 'write it as "+" and digits, e.g. "+14155550100"'
            )
        return value

    @field_validator("allow")
    @classmethod
    def _e164_allow(cls, entries: list[AllowEntry]) -> list[AllowEntry]:
        for entry in entries:
            if entry != "*" and not (isinstance(entry, str) and _E164.fullmatch(entry)):
                raise ConfigValueError(
                    'SMS allow lists hold E.164 phone numbers or "*"',
                    'quote each number with its "+", e.g. allow: ["+14155550100"]',
                )
        return entries

    @model_validator(mode="after")
    def _one_sender(self) -> Self:
        if (self.from_number is None) == (self.messaging_service_sid is None):
            raise ConfigValueError(
                "set exactly one of 'from_number' and 'messaging_service_sid'",
                'add from_number: "+14155550100" (your Twilio number), or a messaging service',
                at=("from_number",),
            )
        return self


class WhatsAppConfig(ChannelConfigBase):
    type: Literal["whatsapp"] = Field(
        "whatsapp", description="Channel kind: the WhatsApp Business Cloud API."
    )
    allow: list[AllowEntry] = allow_list_field('WhatsApp ids (the phone number without "+")')
    access_token: Secret = Field(description="System user or app access token for the Graph API.")
    phone_number_id: str = Field(
        pattern=r"^[0-9]{1,32}$", description="Id of the business phone number (not the number)."
    )
    app_secret: Secret = Field(
        description="App secret: verifies each webhook's X-Hub-Signature-256."
    )
    verify_token: Secret = Field(
        description="Token you chose in the app dashboard; answers the webhook verification."
    )
    webhook_path: UrlPath = webhook_path_field("/whatsapp/webhook", "WhatsApp's webhooks")
    api_base_url: HttpUrlText = Field(
        "https://graph.facebook.com/v21.0",
        description="Graph API base URL, including its version.",
    )

    @field_validator("allow")
    @classmethod
    def _whatsapp_ids(cls, entries: list[AllowEntry]) -> list[AllowEntry]:
        for entry in entries:
            if entry == "*":
                continue
            if not _WHATSAPP_ID.fullmatch(str(entry)):
                raise ConfigValueError(
                    'WhatsApp allow lists hold phone numbers in digits, without "+", or "*"',
                    'write +14155550100 as "14155550100"',
                )
        return entries
