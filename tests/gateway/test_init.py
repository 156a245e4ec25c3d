"""`octos-gateway init`: non-interactive and interactive, never overwriting without asking."""

from __future__ import annotations

import io
import stat
from pathlib import Path

import pytest
import yaml

from gateway.cli import main


def test_every_channel_and_openai_without_questions_passes_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN", "SLACK_BOT_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    target = tmp_path / "bot"
    channels = [
        arg
        for name in ("telegram", "discord", "slack", "api", "cli")
        for arg in ("--channel", name)
    ]
    code = main(
        [
            "init",
            str(target),
            "--yes",
            *channels,
            "--agent",
            "openai",
            "--model",
            "llama3",
            "--base-url",
            "http://127.0.0.1:11434/v1",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert f"octos-gateway run -c {target / 'gateway.yaml'}" in out
    assert f"octos-gateway doctor -c {target / 'gateway.yaml'}" in out
    assert "warning" not in out

    profile = yaml.safe_load((target / "profiles" / "main.yaml").read_text())
    assert [c["type"] for c in profile["channels"]] == [
        "telegram",
        "discord",
        "slack",
        "api",
        "cli",
    ]
    assert profile["agent"] == {
        "type": "openai",
        "base_url": "http://127.0.0.1:11434/v1",
        "model": "llama3",
        "api_key": "${OPENAI_API_KEY:-}",
    }
    assert profile["channels"][0] == {
        "type": "telegram",
        "token": "${TELEGRAM_BOT_TOKEN}",
        "allow": [],
        "pairing": True,
    }
    env = (target / ".env").read_text()
    for name in (
        "TELEGRAM_BOT_TOKEN=",
        "DISCORD_BOT_TOKEN=",
        "SLACK_BOT_TOKEN=",
        "SLACK_APP_TOKEN=",
        "API_TOKEN=",
        "OPENAI_API_KEY=",
    ):
        assert f"\n{name}" in env

    assert main(["check", "-c", str(target / "gateway.yaml")]) == 0
    assert "is valid (1 profile: main)" in capsys.readouterr().out


def test_the_default_is_the_echo_agent_on_the_web_chat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", str(tmp_path), "--yes"]) == 0
    assert "open http://127.0.0.1:8091" in capsys.readouterr().out
    profile = yaml.safe_load((tmp_path / "profiles" / "main.yaml").read_text())
    assert profile["agent"]["type"] == "echo"
    assert [c["type"] for c in profile["channels"]] == ["api"]
    assert main(["check", "-c", str(tmp_path / "gateway.yaml")]) == 0


def test_existing_files_are_kept_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gateway.yaml").write_text("# mine\n")
    assert main(["init", str(tmp_path), "--yes"]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'gateway.yaml'} exists; kept it (pass --force" in err
    assert "error" not in err
    assert (tmp_path / "gateway.yaml").read_text() == "# mine\n"
    assert not (tmp_path / "profiles").exists()

    assert main(["init", str(tmp_path), "--yes", "--force"]) == 0
    assert "data_dir: data" in (tmp_path / "gateway.yaml").read_text()


def test_questions_are_asked_and_bad_answers_asked_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("OLD=1\n")
    answers = "irc, api\ntelegram, api\nopenai\n\nqwen2\nn\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(answers))
    # Declining is the user's choice, not a failure: a plain message and exit status 0.
    assert main(["init", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "unknown channel irc" in out.out
    assert "overwrite it? [y/N]" in out.out
    assert f"kept {tmp_path / '.env'}\nnothing written\n" in out.out
    assert out.err == ""
    assert (tmp_path / ".env").read_text() == "OLD=1\n"
    assert not (tmp_path / "gateway.yaml").exists()

    monkeypatch.setattr("sys.stdin", io.StringIO("telegram, api\nopenai\n\nqwen2\ny\n"))
    assert main(["init", str(tmp_path)]) == 0
    profile = yaml.safe_load((tmp_path / "profiles" / "main.yaml").read_text())
    assert [c["type"] for c in profile["channels"]] == ["telegram", "api"]
    assert profile["agent"]["model"] == "qwen2"
    assert profile["agent"]["base_url"] == "https://api.openai.com/v1"
    assert "TELEGRAM_BOT_TOKEN=" in (tmp_path / ".env").read_text()
    assert main(["check", "-c", str(tmp_path / "gateway.yaml")]) == 0


def test_the_env_file_is_readable_by_its_owner_only_even_when_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = tmp_path / ".env"
    assert main(["init", str(tmp_path), "--yes", "--channel", "telegram"]) == 0
    assert stat.S_IMODE(env.stat().st_mode) == 0o600

    env.chmod(0o644)
    assert main(["init", str(tmp_path), "--yes", "--channel", "telegram", "--force"]) == 0
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    assert "TELEGRAM_BOT_TOKEN=" in env.read_text()
