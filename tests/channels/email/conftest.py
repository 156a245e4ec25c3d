"""The email channel against the fake IMAP and SMTP servers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from config import EmailConfig
from tests.channels.conftest import fake_fixture
from tests.fakes.imap_server import FakeImap
from tests.fakes.smtp_server import FakeSmtp

ALICE = "alice@example.org"
BOT = "bot@example.org"


imap = fake_fixture(FakeImap)


smtp = fake_fixture(FakeSmtp)


def email_config(imap_fake: FakeImap, smtp_fake: FakeSmtp, **overrides: Any) -> EmailConfig:
    imap_settings = {
        "host": "127.0.0.1",
        "port": imap_fake.port,
        "security": "none",
        "password": imap_fake.password,
        **overrides.pop("imap", {}),
    }
    smtp_settings = {
        "host": "127.0.0.1",
        "port": smtp_fake.port,
        "security": "none",
        "password": smtp_fake.password,
        **overrides.pop("smtp", {}),
    }
    return EmailConfig.model_validate(
        {
            "address": BOT,
            "imap": imap_settings,
            "smtp": smtp_settings,
            "allow": [ALICE, "*@friends.example"],
            **overrides,
        }
    )


@pytest.fixture
def make_config(imap: FakeImap, smtp: FakeSmtp) -> Callable[..., EmailConfig]:
    return lambda **overrides: email_config(imap, smtp, **overrides)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "profile"
