"""Replies given up on in a cluster become dead letters, as in one process: through an ingress
and a worker daemon on real NATS and PostgreSQL and the Telegram fake, a reply the platform
refuses for good is kept in the dead-letter stream with its reason, listed by `octos-gateway
dead-letters`, counted on /metrics, sent once by `retry` after the platform recovers, and
forgotten by `drop`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.e2e.cluster_daemons import echo_on_telegram, processes, start_role
from tests.fakes.telegram_server import FakeTelegram
from tests.support.cli import CliResult, run_cli
from tests.support.daemon import DaemonProcess
from tests.support.nats import OwnStreams
from tests.support.postgres import column, fresh_scope

pytestmark = pytest.mark.slow

USER = 4301
BLOCKED = "Forbidden: bot was blocked by the user"


async def dead_letters(config: Path, *args: str) -> CliResult:
    return await run_cli("dead-letters", *args, "-c", str(config), cwd=config.parent)


def kept(ingress: DaemonProcess) -> list[int]:
    """The dead-letter ids of the replies the ingress kept, in order."""
    return [
        int(event["dead_letter"])
        for event in ingress.logs
        if event.get("event") == "cluster.reply_dead_letter"
    ]


async def test_a_reply_refused_for_good_is_a_dead_letter_retried_once_or_dropped(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, streams: OwnStreams
) -> None:
    profile = fresh_scope()
    async with FakeTelegram() as fake, processes() as running:
        config = echo_on_telegram(
            tmp_path, fake, profile, USER, prefix=nats_prefix, dsn=postgres_dsn
        )
        ingress, worker = await asyncio.gather(
            start_role(config, "ingress"), start_role(config, "worker")
        )
        running += [ingress, worker]
        # Refused however often it is asked: the bot was blocked.
        fake.fail_next("sendMessage", 403, BLOCKED, times=1_000)
        fake.push_message(USER, "are you there?", user_id=USER)
        await ingress.wait_logged("cluster.reply_dead_letter", more_than=0)
        fake.push_message(USER, "hello again", user_id=USER)
        await ingress.wait_logged("cluster.reply_dead_letter", more_than=1)
        first, second = kept(ingress)

        listed = await dead_letters(config, "list")
        assert listed.code == 0, listed.err
        lines = listed.out.splitlines()
        assert [line.split("\t")[0] for line in lines] == [str(first), str(second)]
        assert lines[0].startswith(f"{first}\t{profile}:telegram:{USER}\treply given up ")
        assert "\tauth\t" in lines[0]
        assert "bot was blocked" in lines[0]
        shown = json.loads((await dead_letters(config, "show", str(first))).out)
        assert (shown["kind"], shown["reason"]) == ("reply", "auth")
        assert shown["reply"]["content"] == "are you there?"
        delivery_id = shown["reply"]["delivery_id"]
        assert (
            await ingress.metric(
                "octos_reply_dead_letters_total", profile=profile, channel="telegram", reason="auth"
            )
            == 2
        )

        dropped = await dead_letters(config, "drop", str(second))
        assert dropped.code == 0, dropped.err
        [left] = (await dead_letters(config, "list")).out.splitlines()
        assert left.startswith(f"{first}\t")

        fake.recover("sendMessage")
        tried_before = len(fake.calls("sendMessage"))
        retried = await dead_letters(config, "retry", str(first))
        assert retried.code == 0, retried.err
        assert "outbound sequence" in retried.out
        await fake.wait_until(lambda: len(fake.bot_messages(USER)) == 1, timeout_s=30)
        [message] = fake.bot_messages(USER)
        assert message["text"] == "are you there?"
        # Delivered, recorded and acknowledged: with the turn's delivery id, under the retry's
        # own message id.
        assert await streams.left_once_settled("OUT", timeout_s=30) == 0
        recorded = await column(
            postgres_dsn,
            "SELECT turn_id FROM octos_cluster_deliveries "
            "WHERE scope = $1 AND msg_id = $2 AND delivered",
            profile,
            f"retry.{delivery_id}.{first}",
        )
        assert recorded == [delivery_id]
        assert (await dead_letters(config, "list")).out == ""
        again = await dead_letters(config, "retry", str(first))
        assert again.code == 1
        assert f"no dead letter {first}" in again.err
        assert await ingress.stop_cleanly() == 0
        assert await worker.stop_cleanly() == 0
        # Sent once: nothing more went to Telegram after the retry's one message.
        assert len(fake.calls("sendMessage")) == tried_before + 1
        assert len(kept(ingress)) == 2
