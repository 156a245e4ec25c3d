"""`octos-gateway doctor`: the real CLI against the local fakes, good and bad credentials."""

from __future__ import annotations

import asyncio
import socket
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.support.cli import CliResult, run_cli
from tests.support.daemon import free_port, write_config
from tests.support.nats import NATS_URL
from tests.support.postgres import ADMIN_DSN

pytestmark = pytest.mark.slow

API_KEY = "sk-test-doctor"


@dataclass
class Fakes:
    telegram: FakeTelegram
    discord: FakeDiscord
    slack: FakeSlack
    openai: FakeOpenAI


@pytest.fixture
async def fakes() -> AsyncIterator[Fakes]:
    async with (
        FakeTelegram() as telegram,
        FakeDiscord() as discord,
        FakeSlack() as slack,
        FakeOpenAI(api_key=API_KEY) as openai,
    ):
        yield Fakes(telegram, discord, slack, openai)


def profile(
    fakes: Fakes,
    *,
    telegram_token: str | None = None,
    discord_token: str | None = None,
    slack_token: str | None = None,
    api_key: str = API_KEY,
    model: str = "fake-model",
    api_port: int = 0,
) -> str:
    return textwrap.dedent(
        f"""\
        agent: {{type: openai, base_url: "{fakes.openai.base_url}", model: {model},
                 api_key: {api_key}}}
        channels:
          - type: telegram
            token: "{telegram_token or fakes.telegram.token}"
            base_url: {fakes.telegram.base_url}
            allow: ["*"]
          - type: discord
            token: "{discord_token or fakes.discord.token}"
            api_base_url: {fakes.discord.api_base_url}
            gateway_url: {fakes.discord.gateway_url}
            allow: ["*"]
          - type: slack
            bot_token: "{slack_token or fakes.slack.bot_token}"
            app_token: "{fakes.slack.app_token}"
            base_url: {fakes.slack.base_url}
            allow: []
          - type: api
            port: {api_port}
        """
    )


def lines_of(result: CliResult, check: str) -> list[str]:
    """The table line of one check, and its fix line when there is one."""
    lines = result.out.splitlines()
    for index, line in enumerate(lines):
        if line.startswith(check):
            follow = lines[index + 1 : index + 2]
            return [line, *(f for f in follow if f.strip().startswith("fix:"))]
    raise AssertionError(f"no line for {check!r} in:\n{result.out}")


async def test_good_credentials_pass_every_probe(fakes: Fakes, tmp_path: Path) -> None:
    config = write_config(tmp_path, {"bot": profile(fakes)})
    result = await run_cli("doctor", "-c", str(config), cwd=tmp_path)
    assert result.code == 0, result.out + result.err
    assert "ok      valid, 1 profile: bot" in lines_of(result, "config ")[0]
    assert "open on this machine" in lines_of(result, "status page")[0]
    assert f"@{fakes.discord.bot.username}" in lines_of(result, "bot: channel discord")[0]
    assert " ok " in lines_of(result, "bot: channel telegram")[0]
    assert "@octos" in lines_of(result, "bot: channel slack")[0]
    assert "skip" in lines_of(result, "bot: channel api")[0]
    assert "model fake-model" in lines_of(result, "bot: agent openai")[0]
    # The static warning `run` would log: slack's empty allow list.
    assert "empty allow list" in result.out
    assert "0 failures, 1 warning" in result.out
    assert API_KEY not in result.out + result.err
    assert [r.path for r in fakes.openai.requests] == ["/v1/models"]


async def test_bad_credentials_fail_with_a_fix_each(fakes: Fakes, tmp_path: Path) -> None:
    bad = profile(
        fakes,
        telegram_token="987654321:WRONG-token_abcdefghijklmnopqrstuvw",
        discord_token="wrong-discord-token",
        slack_token="xoxb-1-wrong",
        api_key="sk-wrong",
    )
    config = write_config(tmp_path, {"bot": bad})
    result = await run_cli("doctor", "-c", str(config), cwd=tmp_path)
    assert result.code == 1
    telegram = lines_of(result, "bot: channel telegram")
    assert "FAIL" in telegram[0]
    assert "@BotFather" in telegram[1]
    discord = lines_of(result, "bot: channel discord")
    assert "FAIL" in discord[0]
    assert "developer portal" in discord[1]
    slack = lines_of(result, "bot: channel slack")
    assert "invalid_auth" in slack[0]
    assert "fix: check bot_token" in slack[1]
    agent = lines_of(result, "bot: agent openai")
    assert "refused the API key" in agent[0]
    assert "fix: check api_key" in agent[1]
    assert "4 failures" in result.out
    for secret in ("WRONG-token", "wrong-discord-token", "xoxb-1-wrong", "sk-wrong"):
        assert secret not in result.out + result.err


async def test_an_unknown_model_warns_and_a_busy_port_fails(fakes: Fakes, tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        busy = squatter.getsockname()[1]
        config = write_config(tmp_path, {"bot": profile(fakes, model="gpt-9", api_port=busy)})
        result = await run_cli("doctor", "-c", str(config), cwd=tmp_path)
    assert result.code == 1
    agent = lines_of(result, "bot: agent openai")
    assert "warn" in agent[0]
    assert "'gpt-9' is not in the server's list (fake-model)" in agent[0]
    port = lines_of(result, f"port 127.0.0.1:{busy} (bot api)")
    assert "already in use" in port[0]
    assert "--api-port" in port[1]


async def test_the_transcription_endpoint_is_probed_when_configured(
    fakes: Fakes, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    reached = profile(fakes) + (
        f'transcription: {{base_url: "{fakes.openai.base_url}", model: fake-model, '
        f"api_key: {API_KEY}}}\n"
    )
    unreachable = profile(fakes) + f'transcription: {{base_url: "{dead}"}}\n'
    config = write_config(tmp_path, {"bot": reached, "other": unreachable})
    result = await run_cli("doctor", "-c", str(config), "--timeout", "3", cwd=tmp_path)
    ok = lines_of(result, "bot: transcription")
    assert " ok " in ok[0]
    assert "model fake-model" in ok[0]
    failed = lines_of(result, "other: transcription")
    assert f"cannot reach {dead}" in failed[0]
    assert "fix: check base_url" in failed[1]
    assert API_KEY not in result.out + result.err


async def test_an_unreachable_agent_fails_and_invalid_config_is_listed(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    agent = f'agent: {{type: openai, base_url: "{dead}", model: m}}\n'
    config = write_config(tmp_path, {"bot": agent + "channels: [{type: cli}]"})
    result = await run_cli("doctor", "-c", str(config), "--timeout", "3", cwd=tmp_path)
    assert result.code == 1
    assert f"cannot reach {dead}" in lines_of(result, "bot: agent openai")[0]

    (tmp_path / "profiles" / "bot.yaml").write_text("channels: [{type: telegram}]\n")
    result = await run_cli("doctor", "-c", str(config), cwd=tmp_path)
    assert result.code == 1
    [line] = [line for line in result.out.splitlines() if "FAIL" in line]
    assert f"{tmp_path / 'profiles' / 'bot.yaml'}:1:" in line
    assert "token" in line


def cluster_config(directory: Path, nats_url: str) -> Path:
    """A cluster's gateway.yaml (bus on NATS, sessions in the test PostgreSQL), one CLI profile."""
    config = write_config(directory, {"bot": "channels: [{type: cli}]\n"})
    config.write_text(
        config.read_text()
        + f'bus: {{backend: nats, nats: {{url: "{nats_url}", connect_timeout_s: 3}}}}\n'
        + f'store: {{backend: postgres, dsn: "{ADMIN_DSN}"}}\n'
    )
    return config


@asynccontextmanager
async def nats_without_jetstream() -> AsyncIterator[str]:
    """A nats-server of the test's own, JetStream off: its URL once it accepts clients."""
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        "nats-server", "-a", "127.0.0.1", "-p", str(port), stderr=asyncio.subprocess.PIPE
    )
    try:
        assert server.stderr is not None
        async with asyncio.timeout(30):
            while b"Server is ready" not in await server.stderr.readline():
                assert not server.stderr.at_eof(), "nats-server exited"
        yield f"nats://127.0.0.1:{port}"
    finally:
        server.kill()
        await server.wait()


async def test_nats_is_probed_with_its_jetstream(tmp_path: Path) -> None:
    dead = f"nats://octos:s3cret-pw@127.0.0.1:{free_port()}"
    result = await run_cli("doctor", "-c", str(cluster_config(tmp_path, dead)), cwd=tmp_path)
    assert result.code == 1, result.out
    nats = lines_of(result, "nats nats://octos:***@127.0.0.1:")
    assert "FAIL" in nats[0]
    assert "JetStream enabled (-js" in nats[1]
    assert "s3cret-pw" not in result.out + result.err
    # The client's own retries are not printed amid the table.
    assert "nats.error" not in result.out + result.err

    async with nats_without_jetstream() as plain:
        result = await run_cli("doctor", "-c", str(cluster_config(tmp_path, plain)), cwd=tmp_path)
    assert result.code == 1, result.out
    nats = lines_of(result, f"nats {plain}")
    assert "FAIL" in nats[0]
    assert "JetStream enabled (-js" in nats[1]

    result = await run_cli("doctor", "-c", str(cluster_config(tmp_path, NATS_URL)), cwd=tmp_path)
    assert result.code == 0, result.out
    assert "ok      connected, JetStream answers" in lines_of(result, f"nats {NATS_URL}")[0]
    assert "ok      connected" in lines_of(result, "postgresql")[0]


async def test_secrets_still_as_init_wrote_them_fail_with_where_to_put_them(
    fakes: Fakes, tmp_path: Path
) -> None:
    init = await run_cli(
        "init", "mybot", "--yes", "--channel", "telegram", "--channel", "slack", cwd=tmp_path
    )
    assert init.code == 0, init.err
    profile_file = tmp_path / "mybot" / "profiles" / "main.yaml"
    # Point the channels at the fakes, so that a real token is seen to pass.
    profile_file.write_text(
        profile_file.read_text()
        .replace("type: telegram\n", f"type: telegram\n    base_url: {fakes.telegram.base_url}\n")
        .replace("type: slack\n", f"type: slack\n    base_url: {fakes.slack.base_url}\n")
    )
    result = await run_cli("doctor", "-c", "mybot/gateway.yaml", cwd=tmp_path)
    assert result.code == 1, result.out
    telegram = lines_of(result, "main: channel telegram")
    assert "FAIL    TELEGRAM_BOT_TOKEN is still the placeholder from init" in telegram[0]
    assert "fix: replace the placeholder in mybot/.env" in telegram[1]
    slack = lines_of(result, "main: channel slack")
    assert "SLACK_BOT_TOKEN and SLACK_APP_TOKEN are still the placeholder" in slack[0]
    assert "fix: replace the placeholder in mybot/.env" in slack[1]

    env_file = tmp_path / "mybot" / ".env"
    env_file.write_text(
        env_file.read_text().replace(
            "TELEGRAM_BOT_TOKEN=paste-the-token-from-BotFather",
            f"TELEGRAM_BOT_TOKEN={fakes.telegram.token}",
        )
    )
    result = await run_cli("doctor", "-c", "mybot/gateway.yaml", cwd=tmp_path)
    assert " ok " in lines_of(result, "main: channel telegram")[0]
    assert "placeholder" in lines_of(result, "main: channel slack")[0]
