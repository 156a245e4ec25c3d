"""Receiving through imap-tools against the fake IMAP server: UIDs, `\\Seen`, IDLE, state."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from channels.email import EmailChannel
from channels.errors import FatalChannelError
from channels.health import HealthStatus
from config import EmailConfig
from tests.channels.email.conftest import ALICE, BOT
from tests.channels.email.inbound import ScriptedInbound
from tests.fakes.imap_server import FakeImap
from tests.fakes.mail import make_mail

WAIT_S = 10.0


@asynccontextmanager
async def running(
    config: EmailConfig, data_dir: Path, inbound: ScriptedInbound
) -> AsyncIterator[tuple[EmailChannel, asyncio.Task[None]]]:
    channel = EmailChannel(config, data_dir=data_dir)
    task = asyncio.create_task(channel.start(inbound), name="test:email")
    try:
        yield channel, task
    finally:
        await channel.stop()
        await asyncio.wait({task}, timeout=WAIT_S)
        assert task.done()


async def idling(imap: FakeImap, task: asyncio.Task[None], count: int = 1) -> None:
    await imap.wait_until(lambda: imap.idling >= count or task.done(), WAIT_S)
    assert not task.done(), task


async def test_a_message_is_marked_seen_only_after_the_gateway_has_it(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    inbound = ScriptedInbound()
    inbound.durable.clear()
    async with running(make_config(), data_dir, inbound) as (_channel, task):
        await idling(imap, task)
        uid = await imap.deliver(
            make_mail(f"Alice <{ALICE}>", "What time is it?", message_id="<q1@client.example>")
        )
        await inbound.wait_until(lambda: len(inbound.offered) == 1)
        assert not imap.is_seen(uid)
        assert not any(command.startswith("UID STORE") for command in imap.commands)
        inbound.durable.set()
        await imap.wait_until(lambda: imap.is_seen(uid), WAIT_S)

    [message] = inbound.received
    assert message.channel == "email"
    assert message.sender_id == message.chat_id == ALICE
    assert message.content == "What time is it?"
    assert message.message_id == "q1@client.example"
    assert message.metadata["subject"] == "A question"
    # The body was read without setting \Seen on the server (BODY.PEEK).
    assert any("BODY.PEEK[]" in command for command in imap.commands)


async def test_mail_announced_with_an_earlier_answer_is_not_left_until_the_next_idle(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    inbound = ScriptedInbound()
    inbound.durable.clear()
    # IDLE would wait far longer than this test: only the announcement can wake the reader.
    config = make_config()
    async with running(config, data_dir, inbound) as (channel, task):
        channel._reader.idle_timeout_s = 600.0
        await idling(imap, task)
        first = await imap.deliver(make_mail(ALICE, "first"))
        await inbound.wait_until(lambda: len(inbound.offered) == 1)
        # Arrives while the first is being handled: the server says "* 2 EXISTS" along
        # with its answer to the STORE that follows, not during IDLE.
        second = await imap.deliver(make_mail(ALICE, "second"))
        inbound.durable.set()
        await imap.wait_until(lambda: imap.is_seen(first) and imap.is_seen(second), WAIT_S)
    assert [m.content for m in inbound.received] == ["first", "second"]


async def test_a_full_backlog_is_waited_out_and_the_message_handed_over_once(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    inbound = ScriptedInbound()
    inbound.refusals = 2
    async with running(make_config(), data_dir, inbound) as (_channel, task):
        await idling(imap, task)
        uid = await imap.deliver(make_mail(ALICE, "are you busy?"))
        await imap.wait_until(lambda: imap.is_seen(uid), WAIT_S)

    assert len(inbound.offered) == 3
    assert [m.content for m in inbound.received] == ["are you busy?"]


async def test_the_uid_mark_survives_a_restart_and_only_new_mail_is_read(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    inbound = ScriptedInbound()
    config = make_config()
    async with running(config, data_dir, inbound) as (_channel, task):
        await idling(imap, task)
        first = await imap.deliver(make_mail(ALICE, "first"))
        await imap.wait_until(lambda: imap.is_seen(first), WAIT_S)
    state = json.loads((data_dir / "email" / "uid-state.json").read_text())
    assert state == {"uidvalidity": imap.uidvalidity, "last_uid": first}

    # Someone marks the handled mail unread again in their mail program; mail arrives meanwhile.
    imap.mails[0].flags.clear()
    second = await imap.deliver(make_mail(ALICE, "second"))
    async with running(config, data_dir, inbound) as (_channel, task):
        await imap.wait_until(lambda: imap.is_seen(second), WAIT_S)
        await idling(imap, task)
    assert [m.content for m in inbound.received] == ["first", "second"]
    assert f"UID SEARCH UID {first + 1}:*" in imap.commands


async def test_a_new_uidvalidity_falls_back_to_the_unseen_messages(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    inbound = ScriptedInbound()
    config = make_config()
    for n in range(3):
        await imap.deliver(make_mail(ALICE, f"old {n}"), flags=("\\Seen",))
    async with running(config, data_dir, inbound) as (_channel, task):
        await idling(imap, task)
        await imap.deliver(make_mail(ALICE, "before the rebuild"))
        await imap.wait_until(lambda: imap.is_seen(4), WAIT_S)
    await imap.renumber(uidvalidity=2000)
    imap.mails[1].flags.clear()  # one old message is unseen in the rebuilt folder
    async with running(config, data_dir, inbound) as (_channel, task):
        await imap.wait_until(lambda: imap.is_seen(2), WAIT_S)
        await idling(imap, task)
    # Seen mail is not read again; the unseen one is.
    assert [m.content for m in inbound.received] == ["before the rebuild", "old 1"]
    state = json.loads((data_dir / "email" / "uid-state.json").read_text())
    assert state["uidvalidity"] == 2000


async def test_the_first_start_reads_the_unseen_backlog_but_not_old_read_mail(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    await imap.deliver(make_mail(ALICE, "already read"), flags=("\\Seen",))
    waiting = await imap.deliver(make_mail(ALICE, "waiting for you"))
    inbound = ScriptedInbound()
    async with running(make_config(), data_dir, inbound) as (_channel, task):
        await imap.wait_until(lambda: imap.is_seen(waiting), WAIT_S)
        await idling(imap, task)
    assert [m.content for m in inbound.received] == ["waiting for you"]


async def test_without_idle_the_mailbox_is_polled(
    make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    async with FakeImap(supports_idle=False) as imap:
        config = make_config(imap={"port": imap.port}, poll_interval_s=0.2)
        inbound = ScriptedInbound()
        async with running(config, data_dir, inbound) as (_channel, _task):
            await imap.wait_until(lambda: imap.connections == 1, WAIT_S)
            uid = await imap.deliver(make_mail(ALICE, "anyone polling?"))
            await imap.wait_until(lambda: imap.is_seen(uid), WAIT_S)
        assert "IDLE" not in imap.commands
    assert [m.content for m in inbound.received] == ["anyone polling?"]


async def test_automatic_mail_and_the_bots_own_mail_are_not_answered(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    inbound = ScriptedInbound()
    async with running(make_config(), data_dir, inbound) as (_channel, task):
        await idling(imap, task)
        vacation = await imap.deliver(
            make_mail(ALICE, "I am away", headers={"Auto-Submitted": "auto-replied"})
        )
        own = await imap.deliver(make_mail(BOT, "a copy of my own reply"))
        real = await imap.deliver(make_mail(ALICE, "a real question"))
        await imap.wait_until(lambda: imap.is_seen(real), WAIT_S)
    assert [m.content for m in inbound.received] == ["a real question"]
    assert not imap.is_seen(vacation)
    assert not imap.is_seen(own)


async def test_a_refused_login_is_fatal_and_marks_the_channel_down(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    channel = EmailChannel(make_config(imap={"password": "wrong"}), data_dir=data_dir)
    with pytest.raises(FatalChannelError, match=r"refused the login.*imap.password"):
        await asyncio.wait_for(channel.start(ScriptedInbound()), WAIT_S)
    health = await channel.health_check()
    assert health.status is HealthStatus.DOWN
    assert imap.logins_refused == 1


async def test_a_dropped_connection_reconnects_and_keeps_reading(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    inbound = ScriptedInbound()
    channel = EmailChannel(make_config(), data_dir=data_dir)
    channel._reader.backoff = type(channel._reader.backoff)(initial_s=0.05, max_s=0.1)
    task = asyncio.create_task(channel.start(inbound), name="test:email")
    try:
        await idling(imap, task)
        await imap.drop_connections()
        uid = await imap.deliver(make_mail(ALICE, "after the drop"))
        await imap.wait_until(lambda: imap.is_seen(uid), WAIT_S)
    finally:
        await channel.stop()
        await asyncio.wait({task}, timeout=WAIT_S)
    assert [m.content for m in inbound.received] == ["after the drop"]
    assert imap.commands.count('SELECT "INBOX"') >= 2


async def test_stop_ends_an_idle_at_once(
    imap: FakeImap, make_config: Callable[..., EmailConfig], data_dir: Path
) -> None:
    inbound = ScriptedInbound()
    channel = EmailChannel(make_config(), data_dir=data_dir)
    task = asyncio.create_task(channel.start(inbound), name="test:email")
    await idling(imap, task)
    # Far below the IDLE timeout (300 s): stopping interrupts the IDLE, it does not wait it out.
    await asyncio.wait_for(channel.stop(), WAIT_S)
    await asyncio.wait({task}, timeout=WAIT_S)
    assert task.done()
    assert task.exception() is None
    await imap.wait_until(lambda: imap.connections == 0, WAIT_S)
