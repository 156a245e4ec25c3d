"""Edits and deletes in a cluster (a worker and an ingress, NATS and PostgreSQL), through the
daemon subprocesses and the platform fakes, as `test_edits_daemon` checks one process: a
Telegram edit of a message still waiting behind a running turn runs one turn, on the new text;
an edit after its turn is a new turn marked as an edit; an edited `/reset` is no second reset;
a Slack delete of a waiting message drops it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.conftest import WAIT_S
from tests.e2e.test_edits_daemon import (
    ALICE,
    USER,
    edited_commands_are_not_run,
    shown,
    slack_profile,
    telegram_profile,
)
from tests.fakes.gated_webhook import GatedWebhook
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow


async def test_telegram_edits_before_and_after_the_turn(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    chat = USER + 10
    async with FakeTelegram() as telegram, GatedWebhook() as hook, processes() as running:
        profiles = {fresh_scope(): telegram_profile(telegram, hook.url)}
        config = cluster_config(tmp_path, profiles, prefix=nats_prefix, dsn=postgres_dsn)
        running.append(await start_role(config, "worker"))
        running.append(await start_role(config, "ingress"))
        # The agent is held on an earlier message: the one edited waits behind it.
        gate = hook.hold("hold")
        telegram.push_message(chat, "first, hold on", user_id=USER)
        await hook.wait_for(lambda: hook.asked("hold") == 1)
        typo = telegram.push_message(chat, "secnod", user_id=USER)
        telegram.push_edit(chat, typo["message_id"], "second", edit_date=1_700_000_001)
        # The same edit delivered twice is one edit.
        telegram.push_edit(chat, typo["message_id"], "second", edit_date=1_700_000_001)
        await telegram.wait_until(lambda: not telegram.pending_update_ids, timeout_s=WAIT_S)
        gate.set()
        await telegram.wait_until(lambda: "second" in shown(telegram, chat), timeout_s=WAIT_S)
        assert hook.turns == ["first, hold on", "second"]
        [*_, second_reply] = telegram.calls("sendMessage")
        # The turn answers the message edited, in its place.
        assert second_reply.params["reply_parameters"]["message_id"] == typo["message_id"]

        # After its turn, an edit is a new turn, marked.
        telegram.push_edit(chat, typo["message_id"], "second!", edit_date=1_700_000_002)
        await hook.wait_for(lambda: len(hook.turns) == 3)
        assert hook.turns[2] == "[edited] second!"
        await telegram.wait_until(lambda: len(shown(telegram, chat)) == 3, timeout_s=WAIT_S)
        [*_, edit_reply] = telegram.calls("sendMessage")
        assert edit_reply.params["reply_parameters"]["message_id"] == typo["message_id"]
        assert hook.turns == ["first, hold on", "second", "[edited] second!"]


async def test_an_edited_reset_is_not_a_second_reset(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    chat = USER + 11
    async with FakeTelegram() as telegram, GatedWebhook() as hook, processes() as running:
        profiles = {fresh_scope(): telegram_profile(telegram, hook.url)}
        config = cluster_config(tmp_path, profiles, prefix=nats_prefix, dsn=postgres_dsn)
        worker = await start_role(config, "worker")
        running.append(worker)
        running.append(await start_role(config, "ingress"))
        await edited_commands_are_not_run(telegram, hook, chat, worker, "cluster.change_ignored")


async def test_a_slack_delete_drops_a_waiting_message(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    dm = "DEDITS0010"
    async with FakeSlack() as slack, GatedWebhook() as hook, processes() as running:
        profiles = {fresh_scope(): slack_profile(slack, hook.url)}
        config = cluster_config(tmp_path, profiles, prefix=nats_prefix, dsn=postgres_dsn)
        worker = await start_role(config, "worker")
        running.append(worker)
        running.append(await start_role(config, "ingress"))
        await slack.wait_connected(timeout_s=WAIT_S)
        gate = hook.hold("hold")
        await slack.push_event(slack.user_message(dm, ALICE, "hold on", channel_type="im"))
        await hook.wait_for(lambda: hook.asked("hold") == 1)
        doomed = slack.user_message(dm, ALICE, "never mind this", channel_type="im")
        await slack.push_event(doomed)
        deleted = slack.deletion_of(doomed)
        _, envelope = await slack.push_event(deleted)
        # Acknowledged once the ingress has published it, behind the message it deletes.
        await slack.wait_until(lambda: slack.acked(envelope), WAIT_S)
        await slack.push_event(slack.user_message(dm, ALICE, "and this", channel_type="im"))
        gate.set()
        await slack.wait_until(
            lambda: [m["text"] for m in slack.bot_messages(dm)] == ["hold on", "and this"],
            WAIT_S,
        )
        assert hook.turns == ["hold on", "and this"]
        await worker.wait_log(
            lambda e: e.get("event") == "cluster.message_dropped" and e.get("reason") == "deleted"
        )
