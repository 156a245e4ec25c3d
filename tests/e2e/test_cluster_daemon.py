"""The daemon as cluster processes: `--role ingress` with the Telegram fake, `--role worker`s,
the HTTP API through two ingress processes, a worker beside the ingress on one host, dead
letters through the CLI, and the start-up errors (an unreachable NATS exits 69; a split role
without a cluster is refused)."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.telegram_profiles import polling_profile
from tests.fakes.telegram_server import FakeTelegram
from tests.support.cli import run_cli
from tests.support.daemon import free_port, write_config
from tests.support.nats import OwnStreams
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

USER = 5150
AGENT = "{type: echo, delay_s: 0.05}"
ANSWER_TIMEOUT = aiohttp.ClientTimeout(total=30)


async def test_an_ingress_and_two_workers_answer_telegram_in_order(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, streams: OwnStreams
) -> None:
    chats = [7001, 7002, 7003]
    profile = fresh_scope()
    async with FakeTelegram() as fake, processes() as running:
        config = cluster_config(
            tmp_path,
            {profile: polling_profile(fake, USER, "{type: echo, delay_s: 0.05}")},
            prefix=nats_prefix,
            dsn=postgres_dsn,
        )
        running.append(await start_role(config, "worker"))
        running.append(await start_role(config, "worker"))
        ingress = await start_role(config, "ingress")
        running.append(ingress)
        expected = {chat: [f"chat {chat} says {n}" for n in range(6)] for chat in chats}
        for n in range(6):
            for chat in chats:
                fake.push_message(chat, expected[chat][n], user_id=USER)

        def answered() -> bool:
            return all(
                [m["text"] for m in fake.bot_messages(chat)] == expected[chat] for chat in chats
            )

        await fake.wait_until(answered, timeout_s=60)
        # Streamed: the text is shown before the final is delivered; wait for every final.
        await ingress.wait_logged("cluster.hand_over_answered", more_than=17)
        # Every process reports its cluster connections on /readyz.
        status, body = await ingress.get("/readyz")
        assert status == 200, body
        ready = json.loads(body)
        assert ready["cluster"]["role"] == "ingress"
        assert ready["cluster"]["nats"]["connected"] is True
        assert ready["cluster"]["postgres"]["connected"] is True  # its delivery records
        status, body = await running[0].get("/readyz")
        assert status == 200, body
        assert json.loads(body)["cluster"]["postgres"]["connected"] is True
        status, body = await ingress.get("/status.json")
        assert status == 200, body
        assert json.loads(body)["cluster"]["role"] == "ingress"
        # Both workers took turns (partitions are shared out by whoever fetches first).
        turns = [sum(1 for e in w.logs if e.get("event") == "turn.started") for w in running[:2]]
        assert sum(turns) == 18
        assert await streams.left_once_settled("IN", timeout_s=10) == 0
        await fake.wait_until(lambda: fake.pending_update_ids == [], timeout_s=10)
        # SIGTERM: every process stops cleanly (ingress first, as a rolling stop would).
        for daemon in reversed(running):
            daemon.signal(signal.SIGTERM)
            assert await daemon.wait() == 0, daemon.logs[-10:]
    assert await streams.left_once_settled("OUT", timeout_s=10) == 0
    # Each reply's delivery was recorded (before its ack) with the id Telegram gave the message
    # it streamed into.
    sent = sorted(str(m["message_id"]) for chat in chats for m in fake.bot_messages(chat))
    assert await recorded_platform_ids(postgres_dsn, profile) == sent


async def recorded_platform_ids(dsn: str, profile: str) -> list[str]:
    """Every platform message id the ingress recorded as delivered for `profile`."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT platform_ids::text AS ids FROM octos_cluster_deliveries "
            "WHERE scope = $1 AND delivered",
            profile,
        )
    finally:
        await connection.close()
    return sorted(str(i) for row in rows for i in json.loads(row["ids"]))


async def chat(port: int, body: dict[str, Any], *, status: int = 200) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{port}/v1/chat", json=body, timeout=ANSWER_TIMEOUT) as r,
    ):
        assert r.status == status, await r.text()
        answer: dict[str, Any] = await r.json()
        return answer


async def test_the_api_through_two_ingress_processes_answers_every_request_once(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, streams: OwnStreams
) -> None:
    profile = fresh_scope()
    async with processes() as running:
        config = cluster_config(
            tmp_path,
            {profile: "agent: {type: echo, delay_s: 0.02}\nchannels: [{type: api, port: 0}]\n"},
            prefix=nats_prefix,
            dsn=postgres_dsn,
        )
        running.append(await start_role(config, "worker"))
        ports = [free_port(), free_port()]
        for port in ports:
            running.append(
                await start_role(
                    config, "ingress", "--api-port", str(port), ready="api.web_chat_ready"
                )
            )
        requests = [
            (ports[n % 2], {"chat_id": f"api-{n % 5}", "content": f"request {n}"})
            for n in range(40)
        ]
        answers = await asyncio.gather(*(chat(port, body) for port, body in requests))
        assert [a["reply"] for a in answers] == [body["content"] for _port, body in requests]
        # A client retrying on the other ingress gets the stored reply, not a second turn.
        body = {"chat_id": "api-retry", "content": "once", "client_message_id": "r-1"}
        first = await chat(ports[0], body)
        again = await chat(ports[1], body)
        assert first["reply"] == again["reply"] == "once"
        worker = running[0]
        assert sum(1 for e in worker.logs if e.get("event") == "turn.started") == 41
    assert await streams.left_once_settled("IN", timeout_s=10) == 0
    assert await streams.left_once_settled("OUT", timeout_s=10) == 0


async def test_a_worker_starts_beside_the_ingress_that_holds_the_api_port(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    port = free_port()
    async with processes() as running:
        config = cluster_config(
            tmp_path,
            {profile: f"agent: {AGENT}\nchannels: [{{type: api, port: {port}}}]\n"},
            prefix=nats_prefix,
            dsn=postgres_dsn,
        )
        running.append(await start_role(config, "ingress", ready="api.web_chat_ready"))
        # A worker binds no channel: the ingress's port is no reason to refuse it.
        running.append(await start_role(config, "worker"))
        answer = await chat(port, {"chat_id": "beside", "content": "answered by the worker"})
        assert answer["reply"] == "answered by the worker"


async def test_a_failing_message_is_a_dead_letter_the_cli_shows_retries_and_purges(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    port = free_port()
    async with processes() as running:
        config = cluster_config(
            tmp_path,
            {profile: f"agent: {{fail_when: poison}}\nchannels: [{{type: api, port: {port}}}]\n"},
            prefix=nats_prefix,
            dsn=postgres_dsn,
            extra_nats=", max_deliver: 2",
        )
        running.append(await start_role(config, "all", ready="api.web_chat_ready"))
        # A failed turn is an immediate JSON error on the API.
        answer = await chat(port, {"chat_id": "dl", "content": "poison pill"}, status=500)
        assert answer["error"].startswith("Sorry, I could not answer that: agent error.")
        after = await chat(port, {"chat_id": "dl", "content": "fine"})
        assert after["reply"] == "fine"
        listed = await run_cli("dead-letters", "list", "-c", str(config), cwd=tmp_path)
        assert listed.code == 0, listed.err
        (line,) = listed.out.splitlines()
        assert line.startswith(f"1\t{profile}:api:dl\tdelivered 2x\t")
        assert "echo agent fails" in line
        shown = await run_cli("dead-letters", "show", "1", "-c", str(config), cwd=tmp_path)
        assert shown.code == 0, shown.err
        assert json.loads(shown.out)["message"]["content"] == "poison pill"
        missing = await run_cli("dead-letters", "show", "99", "-c", str(config), cwd=tmp_path)
        assert missing.code == 1
        assert "no dead letter 99" in missing.err
        retried = await run_cli("dead-letters", "retry", "1", "-c", str(config), cwd=tmp_path)
        assert retried.code == 0, retried.err
        # Still poison: buried again after its deliveries, as a new dead letter.
        await running[0].wait_log(
            lambda e: e.get("event") == "cluster.dead_letter" and e.get("dead_letter") == 2
        )
        purged = await run_cli("dead-letters", "purge", "-c", str(config), cwd=tmp_path)
        assert purged.out.strip() == "purged 1 dead letter"


async def test_an_unreachable_nats_stops_run_with_exit_69(
    tmp_path: Path, postgres_dsn: str
) -> None:
    config = write_config(tmp_path, {"main": "channels: [{type: api, port: 0}]\n"})
    with config.open("a", encoding="utf-8") as text:
        text.write(
            f'bus: {{backend: nats, nats: {{url: "nats://octos:s3cret@127.0.0.1:{free_port()}", '
            "connect_timeout_s: 2}}\n"
            f'store: {{backend: postgres, dsn: "{postgres_dsn}"}}\n'
        )
    result = await run_cli("run", "-c", str(config), "--role", "worker", cwd=tmp_path)
    assert result.code == 69, result.err
    assert "s3cret" not in result.err + result.out
    assert "cannot use NATS at nats://octos:***@127.0.0.1:" in result.err
    assert "JetStream enabled" in result.err


async def test_a_split_role_needs_the_nats_bus(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"main": "channels: [{type: api, port: 0}]\n"})
    result = await run_cli("run", "-c", str(config), "--role", "ingress", cwd=tmp_path)
    assert result.code == 2
    assert "--role ingress needs a cluster: set bus: {backend: nats}" in result.err
