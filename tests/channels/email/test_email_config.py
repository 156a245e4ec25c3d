"""The email channel's keys: defaults, unknown keys, addresses and allow patterns checked."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from config import ConfigValueError, EmailConfig, ProfileConfig


def config(**overrides: Any) -> dict[str, Any]:
    return {
        "type": "email",
        "address": "bot@example.org",
        "imap": {"host": "imap.example.org", "password": "p"},
        "smtp": {"host": "smtp.example.org"},
        **overrides,
    }


def test_defaults() -> None:
    email = EmailConfig.model_validate(config())
    assert email.imap.folder == "INBOX"
    assert (email.imap.security, email.imap.effective_port) == ("ssl", 993)
    assert (email.smtp.security, email.smtp.effective_port) == ("ssl", 465)
    assert email.smtp.password is None
    assert email.poll_interval_s == 60
    assert email.subject_prefix == "Re: "
    assert email.allow == []
    starttls = EmailConfig.model_validate(
        config(
            imap={"host": "h", "password": "p", "security": "starttls"},
            smtp={"host": "h", "security": "starttls"},
        )
    )
    assert (starttls.imap.effective_port, starttls.smtp.effective_port) == (143, 587)


def test_a_profile_takes_an_email_channel() -> None:
    profile = ProfileConfig.model_validate({"channels": [config(allow=["*@example.org"])]})
    [channel] = profile.channels
    assert isinstance(channel, EmailConfig)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"imap": {"host": "h", "password": "p", "fodler": "INBOX"}}, "fodler"),
        ({"smtp": {"host": "h", "security": "tls"}}, "security"),
        ({"address": "bot.example.org"}, "not an email address"),
        ({"allow": ["@example.org"]}, "neither an email address nor a domain pattern"),
        ({"imap": {"host": "h"}}, "password"),
        ({"poll_interval_s": 0}, "poll_interval_s"),
        ({"subject": "x"}, "subject"),
    ],
)
def test_bad_values_are_errors_that_say_what_to_write(
    overrides: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ValidationError, match=expected):
        EmailConfig.model_validate(config(**overrides))


def test_a_bare_domain_in_allow_suggests_the_domain_pattern() -> None:
    with pytest.raises(ValidationError) as caught:
        EmailConfig.model_validate(config(allow=["alice@example.org", "example.org"]))
    error = caught.value.errors()[0]["ctx"]["error"]
    assert isinstance(error, ConfigValueError)
    assert '"*@example.org"' in error.suggestion


def test_the_password_is_never_shown() -> None:
    email = EmailConfig.model_validate(config(imap={"host": "h", "password": "hunter2"}))
    assert "hunter2" not in repr(email)
    assert "hunter2" not in str(email.model_dump())
