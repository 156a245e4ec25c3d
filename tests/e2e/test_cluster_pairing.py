"""Pairing across ingress processes that share no data directory: a stranger gets a code from
one ingress, `octos-gateway pair` (run with a data directory of its own) approves it, and every
ingress lets them in within seconds; `allow remove` shuts them out of every ingress again.

With `store: {backend: postgres}` the codes and the allow-list overlay are tables in the
sessions' database, not files: each ingress is told of a change (`allow.overlay_reloaded`) by
PostgreSQL, and no `pairing/` directory appears anywhere."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.telegram_profiles import SECRET, post, telegram_profile, update
from tests.fakes.telegram_server import FakeTelegram
from tests.support.cli import run_cli
from tests.support.daemon import DaemonProcess
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

OWNER, STRANGER = 4201, 6666
CODE = re.compile(r"this code: ([A-Z0-9]{4}-[A-Z0-9]{4})")


async def post_update(ingress: DaemonProcess, update_id: int, text: str) -> None:
    body = update(update_id, text, user_id=STRANGER, name="Mallory")
    assert await post(ingress, body, SECRET) == 200


def texts(fake: FakeTelegram) -> list[str]:
    return [str(message["text"]) for message in fake.bot_messages(STRANGER)]


async def test_an_approval_reaches_every_ingress(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    async with FakeTelegram() as fake, processes() as running:
        config = cluster_config(
            tmp_path,
            {profile: telegram_profile(fake, OWNER, pairing=True)},
            prefix=nats_prefix,
            dsn=postgres_dsn,
        )
        own = {role: tmp_path / role for role in ("worker", "ingress-1", "ingress-2")}
        running.append(await start_role(config, "worker", "--data-dir", str(own["worker"])))
        first = await start_role(config, "ingress", "--data-dir", str(own["ingress-1"]))
        second = await start_role(config, "ingress", "--data-dir", str(own["ingress-2"]))
        running.extend([first, second])

        await post_update(first, 1, "let me in")
        await fake.wait_until(lambda: len(texts(fake)) == 1, timeout_s=30)
        found = CODE.search(texts(fake)[0])
        assert found, texts(fake)

        reloads = {
            ingress: ingress.count_logged("allow.overlay_reloaded") for ingress in (first, second)
        }
        paired = await run_cli("pair", found.group(1), "-c", str(config), cwd=tmp_path)
        assert paired.code == 0, paired.err
        assert f"telegram sender {STRANGER} may now talk to profile {profile}" in paired.out
        for ingress, seen in reloads.items():
            await ingress.wait_logged("allow.overlay_reloaded", more_than=seen)

        # Allowed by the ingress that did not issue the code, and by the one that did.
        await post_update(second, 2, "hello via the second")
        await fake.wait_until(lambda: len(texts(fake)) == 2, timeout_s=30)
        await post_update(first, 3, "hello via the first")
        await fake.wait_until(lambda: len(texts(fake)) == 3, timeout_s=30)
        assert texts(fake)[1:] == ["hello via the second", "hello via the first"]

        listed = await run_cli("allow", "list", "-c", str(config), cwd=tmp_path)
        assert f"{profile}\ttelegram\t{STRANGER}\tadded " in listed.out
        reloads = {
            ingress: ingress.count_logged("allow.overlay_reloaded") for ingress in (first, second)
        }
        removed = await run_cli("allow", "remove", str(STRANGER), "-c", str(config), cwd=tmp_path)
        assert removed.code == 0, removed.err
        for ingress, seen in reloads.items():
            await ingress.wait_logged("allow.overlay_reloaded", more_than=seen)
        # Refused by both again: the webhook's 200 comes after the refusal is counted.
        for update_id, ingress in enumerate((first, second), start=4):
            before = await refusals(ingress)
            await post_update(ingress, update_id, "still let in?")
            assert await refusals(ingress) == before + 1
    assert "still let in?" not in texts(fake)
    files = await asyncio.to_thread(lambda: list(tmp_path.rglob("pairing")))
    assert not files, "pairing is kept in PostgreSQL, not in files"


async def refusals(ingress: DaemonProcess) -> float:
    return await ingress.metric("octos_messages_in_total", channel="telegram", outcome="refused")
