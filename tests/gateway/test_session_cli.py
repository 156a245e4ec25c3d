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


def test_every_listed_key_opens_with_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = [
        SessionKey.for_chat("web", "api", "room#1"),  # a chat id with "#", no topic
        SessionKey.for_chat("web", "api", "room", "1"),  # chat "room", topic "1"
        SessionKey.for_chat("web", "api", "a:b#c", "x#y"),
        SessionKey.for_chat("web", "api", "plain", "research"),
    ]

    async def fill() -> None:
        async with SessionStore(tmp_path / "web") as store:
            for index, key in enumerate(keys):
                await store.append(key, Message.user(f"message {index}"))

    asyncio.run(fill())
    assert main(["sessions", "--data-dir", str(tmp_path), "list"]) == 0
    listed = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
    assert sorted(listed) == sorted(
        ["web:api:room%231", "web:api:room#1", "web:api:a:b%23c#x#y", "web:api:plain#research"]
    )
    shown = set()
    for key in listed:
        assert main(["sessions", "--data-dir", str(tmp_path), "show", key]) == 0, key
        (line,) = capsys.readouterr().out.splitlines()
        shown.add(line.split(": ", 1)[1])
    # Each listed key opened a session of its own, not a look-alike.
    assert len(shown) == len(keys)


def test_a_future_schema_file_is_a_one_line_error_naming_it(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (path,) = [p for p in data_dir.rglob("*.jsonl") if "travel" in p.name]
    head, *rest = path.read_text().splitlines(keepends=True)
    meta = json.loads(head)
    meta["schema_version"] = 99
    path.write_text(json.dumps(meta) + "\n" + "".join(rest))
    code = main(["sessions", "--data-dir", str(data_dir), "show", "work:telegram:42#travel"])
    assert code != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert str(path) in err
    assert "schema_version 99" in err
    assert "Traceback" not in err


def test_an_unreadable_data_directory_is_a_one_line_error(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (data_dir / "work" / "users" / "no-colon" / "sessions").mkdir(parents=True)
    (data_dir / "work" / "users" / "no-colon" / "sessions" / "default.jsonl").write_text("x\n")
    assert main(["sessions", "--data-dir", str(data_dir), "list"]) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot list the sessions in")
    assert len(err.splitlines()) == 1


def test_the_program_itself_prints_one_line_and_no_traceback_for_a_future_file(
    data_dir: Path,
) -> None:
    import os
    import subprocess
    import sys

    (path,) = [p for p in data_dir.rglob("*.jsonl") if "travel" in p.name]
    head, *rest = path.read_text().splitlines(keepends=True)
    path.write_text(json.dumps({**json.loads(head), "schema_version": 7}) + "\n" + "".join(rest))
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "gateway", "sessions", "--data-dir", str(data_dir)]
    shown = subprocess.run(
        [*command, "show", "work:telegram:42#travel"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=60,
        check=False,
    )
    assert shown.returncode == 1
    assert shown.stdout == ""
    (line,) = shown.stderr.strip().splitlines()
    assert str(path) in line
    assert "schema_version 7" in line


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
