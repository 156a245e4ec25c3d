"""`octos-gateway sessions list|show|export` and `version`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bus import Message, SessionKey
from gateway.cli import main
from sessions import SessionStore

KEY = SessionKey.parse("work:telegram:42")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    async def fill() -> None:
        async with SessionStore(tmp_path / "work") as store:
            await store.append(KEY, Message.user("what is the weather?"))
            await store.append(KEY, Message.assistant("Sunny, **22 °C**."))
            await store.append(KEY.with_topic("travel"), Message.user("trains to Lyon?"))

    asyncio.run(fill())
    return tmp_path


def test_list_shows_every_session(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "--data-dir", str(data_dir), "list"]) == 0
    out = capsys.readouterr().out
    assert "work:telegram:42\t2 messages" in out
    assert "work:telegram:42#travel\t1 message\t" in out


def test_show_prints_the_messages(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "--data-dir", str(data_dir), "show", "work:telegram:42"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("user: what is the weather?")
    assert lines[1].endswith("assistant: Sunny, **22 °C**.")


def test_export_jsonl_and_markdown(data_dir: Path, tmp_path: Path) -> None:
    jsonl = tmp_path / "out.jsonl"
    args = ["sessions", "--data-dir", str(data_dir), "export", "work:telegram:42"]
    assert main([*args, "-o", str(jsonl)]) == 0
    first, *messages = jsonl.read_text().splitlines()
    assert json.loads(first)["session_key"] == "work:telegram:42"
    assert [Message.from_json(line).content for line in messages] == [
        "what is the weather?",
        "Sunny, **22 °C**.",
    ]
    markdown = tmp_path / "out.md"
    assert main([*args, "--format", "markdown", "-o", str(markdown)]) == 0
    text = markdown.read_text()
    assert "## user" in text
    assert "Sunny, **22 °C**." in text


def test_unknown_session_exits_1_and_says_how_to_find_keys(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sessions", "--data-dir", str(data_dir), "show", "work:telegram:7"]) == 1
    assert "sessions list" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith("octos-gateway ")


def test_location_after_the_action_and_a_wrong_profile(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sessions", "list", "--data-dir", str(data_dir)]) == 0
    assert "work:telegram:42\t2 messages" in capsys.readouterr().out
    assert main(["sessions", "show", "work:telegram:42", "--data-dir", str(data_dir)]) == 0
    assert "what is the weather?" in capsys.readouterr().out
    assert main(["sessions", "list", "--profile", "nope", "--data-dir", str(data_dir)]) == 1
    err = capsys.readouterr().err
    assert "no profile 'nope'" in err
    assert "profiles with data: work" in err


def test_a_malformed_key_names_the_real_form(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sessions", "--data-dir", str(data_dir), "show", "garbage"]) == 1
    err = capsys.readouterr().err
    assert "'garbage' is not a session key" in err
    assert "PROFILE:CHANNEL:CHAT_ID" in err
