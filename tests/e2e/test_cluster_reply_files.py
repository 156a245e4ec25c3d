"""A reply's files in a cluster reach an ingress that does not share the worker's data
directory: the worker keeps their bytes in PostgreSQL with the turn's row, and the ingress
restores them into its own `media/out/<turn id>/` before it sends the reply."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.conftest import logged
from tests.e2e.telegram_profiles import polling_profile
from tests.e2e.test_media_out_daemon import PNG
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

USER = 5252


async def test_an_image_reaches_telegram_through_an_ingress_without_the_workers_files(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    profile = fresh_scope()
    async with FakeTelegram() as fake, FakeWebhook() as hook, processes() as running:
        url = hook.serve("chart.png", PNG, "image/png")
        hook.script(ScriptedReply(text="The chart.", attachments=({"url": url},), held=True))
        text = polling_profile(fake, USER, f'{{type: webhook, url: "{hook.url}"}}')

        def node(name: str) -> Path:
            """A node's config, in a directory (and so a data directory) of its own."""
            directory = tmp_path / name
            directory.mkdir()
            return cluster_config(directory, {profile: text}, prefix=nats_prefix, dsn=postgres_dsn)

        worker = await start_role(node("worker"), "worker")
        running.append(worker)
        intake = await start_role(node("intake"), "ingress")
        running.append(intake)
        fake.push_message(USER, "the chart, please", user_id=USER)
        await hook.control.holding.wait()
        # The ingress that took the message is gone before the reply exists.
        assert await intake.stop_cleanly() == 0
        hook.control.release.set()
        await worker.wait_log(logged("cluster.reply_files_kept"))
        # The worker's copy is gone too: only the database has the bytes now.
        shutil.rmtree(tmp_path / "worker" / "data" / profile / "media" / "out")
        ingress = await start_role(node("ingress"), "ingress")
        running.append(ingress)
        await fake.wait_for_calls("sendPhoto", timeout_s=30)
        assert ingress.count_logged("cluster.reply_file_restored") == 1

    [photo] = fake.calls("sendPhoto")
    assert bytes(photo.files["photo"].data) == PNG
    assert [m["text"] for m in fake.bot_messages(USER) if "text" in m] == ["The chart."]
    media = tmp_path / "ingress" / "data" / profile / "media" / "out"
    assert [path.name for path in media.rglob("*.png")] == ["1-chart.png"]
