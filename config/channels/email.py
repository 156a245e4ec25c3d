"""The email channel's configuration: one mailbox read over IMAP, replies sent over SMTP."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, PositiveFloat, field_validator

from config.channels.base import ChannelConfigBase
from config.common import AllowEntry, ConfigModel, OptionalSecret, Secret, resolve_path
from config.problems import ConfigValueError

Security = Literal["ssl", "starttls", "none"]

#: A port of a mail server; unset picks the usual one for the security mode.
MailPort = Annotated[int, Field(ge=1, le=65535)]

# Deliberately loose: one @, something on each side, no spaces or angle brackets. The mail
# server is the judge of an address; this only catches a typo such as a missing @.
_ADDRESS = re.compile(r"[^@\s<>]+@[^@\s<>]+")
_DOMAIN_PATTERN = re.compile(r"\*@[^@\s<>*]+")

_IMAP_PORTS = {"ssl": 993, "starttls": 143, "none": 143}
_SMTP_PORTS = {"ssl": 465, "starttls": 587, "none": 25}


def _security_field() -> Security:
    """`security`: the same setting, worded once, for the IMAP and the SMTP server."""
    return Field(
        "ssl", description="ssl (implicit TLS), starttls, or none (only on a trusted network)."
    )


def _ca_file_field() -> Path | None:
    """`ca_file`: the same setting, worded once, for the IMAP and the SMTP server."""
    return Field(
        None,
        description="PEM file of the certificate authority that signed the server's "
        "certificate (a private CA): trusted for this server instead of the system's CAs, as "
        "curl's --cacert; relative to gateway.yaml.",
    )


def check_address(value: str) -> str:
    if not _ADDRESS.fullmatch(value.strip()):
        raise ConfigValueError(
            f"{value!r} is not an email address", "write a bare address such as bot@example.org"
        )
    return value.strip()


class ImapSettings(ConfigModel):
    host: str = Field(min_length=1, description="IMAP server that holds the bot's mailbox.")
    port: MailPort | None = Field(
        None, description="IMAP port; unset means 993 with ssl, else 143."
    )
    security: Security = _security_field()
    username: str | None = Field(None, description="IMAP login; unset means the address.")
    password: Secret = Field(description="IMAP password (an app password where one is needed).")
    folder: str = Field("INBOX", min_length=1, description="Mailbox folder the bot reads.")
    ca_file: Path | None = _ca_file_field()

    @property
    def effective_port(self) -> int:
        return self.port or _IMAP_PORTS[self.security]


class SmtpSettings(ConfigModel):
    host: str = Field(min_length=1, description="SMTP server replies are sent through.")
    port: MailPort | None = Field(
        None, description="SMTP port; unset means 465 with ssl, 587 with starttls, 25 with none."
    )
    security: Security = _security_field()
    username: str | None = Field(
        None, description="SMTP login; unset means the address (when a password is set)."
    )
    password: OptionalSecret = Field(
        None, description="SMTP password; unset sends without logging in (a local relay)."
    )
    ca_file: Path | None = _ca_file_field()

    @property
    def effective_port(self) -> int:
        return self.port or _SMTP_PORTS[self.security]


class EmailConfigFields(ConfigModel):
    """The email-specific keys; `config.channels.EmailConfig` adds `type` and the shared ones."""

    allow: list[AllowEntry] = Field(
        default_factory=list,
        description='Sender addresses allowed to write to the bot, or "*@example.org" for a '
        'whole domain; "*" allows everyone, an empty list nobody.',
    )
    address: str = Field(description="The bot's own address: the From of every reply.")
    imap: ImapSettings = Field(description="Where mail is received.")
    smtp: SmtpSettings = Field(description="Where replies are sent.")
    poll_interval_s: PositiveFloat = Field(
        60, description="Seconds between mailbox checks when the server lacks IMAP IDLE."
    )
    subject_prefix: str = Field(
        "Re: ",
        description="Put before the original subject in a reply, in place of the reply markers "
        "it starts with (Re:, RE:, Aw:, Sv:, 回复: ...; Fwd: stays).",
    )

    def resolve_paths(self, base_dir: Path) -> Self:
        """A copy whose relative `ca_file`s (and `~`) are resolved against `base_dir`."""
        servers = {}
        for role in ("imap", "smtp"):
            settings: ImapSettings | SmtpSettings = getattr(self, role)
            if settings.ca_file is not None:
                ca_file = resolve_path(settings.ca_file, base_dir)
                servers[role] = settings.model_copy(update={"ca_file": ca_file})
        return self.model_copy(update=servers)

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        return check_address(value)

    @field_validator("allow")
    @classmethod
    def _allow_entries(cls, entries: list[AllowEntry]) -> list[AllowEntry]:
        for entry in entries:
            text = str(entry).strip()
            if text == "*" or _DOMAIN_PATTERN.fullmatch(text) or _ADDRESS.fullmatch(text):
                continue
            hint = f"*@{text.lstrip('@*')}" if "." in text else "alice@example.org"
            raise ConfigValueError(
                f"{text!r} is neither an email address nor a domain pattern",
                f'write an address, or "{hint}" for everyone at a domain',
            )
        return entries


class EmailConfig(EmailConfigFields, ChannelConfigBase):
    type: Literal["email"] = Field(
        "email", description="Channel kind: a mailbox, read over IMAP and answered over SMTP."
    )
