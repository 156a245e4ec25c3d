"""Which channels poll in one process only (`Channel.single_poller`, see channels/base.py)."""

from __future__ import annotations

from pathlib import Path

from channels.email import EmailChannel
from channels.telegram import TelegramChannel
from config import EmailConfig, TelegramConfig
from tests.channels.recording import RecordingChannel

TOKEN = "123456:test-token"


def test_telegram_polls_alone_only_in_polling_mode(tmp_path: Path) -> None:
    polling = TelegramConfig(token=TOKEN, allow=["*"])
    webhook = TelegramConfig(
        token=TOKEN,
        allow=["*"],
        mode="webhook",
        webhook_url="https://bot.example/telegram/webhook",
        secret_token="s3cret",
    )
    assert TelegramChannel(polling, data_dir=tmp_path).single_poller
    assert not TelegramChannel(webhook, data_dir=tmp_path).single_poller


def test_email_reads_its_mailbox_alone(tmp_path: Path) -> None:
    server = {"host": "mail.example", "password": "pw"}
    config = EmailConfig.model_validate(
        {"address": "bot@mail.example", "imap": server, "smtp": server, "allow": ["*"]}
    )
    assert EmailChannel(config, data_dir=tmp_path).single_poller


def test_a_channel_receives_in_every_process_by_default() -> None:
    assert not RecordingChannel().single_poller
