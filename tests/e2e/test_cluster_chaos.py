"""Chaos in a cluster: workers and the ingress SIGKILLed at random moments while Telegram
messages are in flight over many chats, each process restarted after its kill.

Two ingress processes (the one holding the bot's poller lease polls, the other stands by),
three workers, a slowed echo agent, one planted message that always fails; the leading ingress
is among the kills, so the standby takes the lease over mid-run. At the end every message
is answered exactly once, in its chat's order; the only extra copy a kill explains is a reply
the platform accepted just before the ingress was killed, before it acknowledged the reply, or
the draft of a streamed reply the killed ingress was showing (a beginning of the answer, or the
whole of it, shown before the kill; the answer is then sent whole after it); the streams hold
nothing but the planted dead letter.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.telegram_profiles import polling_profile
from tests.e2e.test_crash_telegram import dedupe, explained_by_a_kill
from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import DaemonProcess
from tests.support.nats import OwnStreams
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

USER = 4202
CHATS = 16
MESSAGES_PER_CHAT = 12
WORKERS = 3
KILLS = ("worker", "ingress", "worker", "worker")
POISON = "poison: this one always fails"
AGENT = '{type: echo, delay_s: 0.08, pieces: 2, fail_when: "poison:"}'


def holds_lease(daemon: DaemonProcess) -> bool:
    """Whether the ingress's last word on the lease was that it took it."""
    said = [e["event"] for e in daemon.logs if str(e.get("event", "")).startswith("lease.")]
    return bool(said) and said[-1] == "lease.acquired"


SEND = ("sendMessage",)
#: How long after a killed process was seen dead the fake may still record a request it made.
LATE_REQUEST_S = 1.0


def shown_at(fake: FakeTelegram, chat: int, text: str, methods: tuple[str, ...]) -> list[float]:
    return [
        call.at
        for method in methods
        for call in fake.calls(method)
        if str(call.params.get("chat_id")) == str(chat) and str(call.params.get("text")) == text
    ]


def a_killed_draft(
    fake: FakeTelegram,
    chat: int,
    draft: str,
    answers: list[str],
    kills: list[tuple[float, float]],
) -> bool:
    """Whether `draft` is what a killed ingress left of a streamed reply it was showing:
    shown in `chat` (sent or edited to) before that ingress was seen dead, and an answer it
    begins (or is) sent whole after the kill was signalled, by the ingress that took the reply
    over. Before it was seen dead (and `LATE_REQUEST_S` more), not before the signal: the signal
    takes effect a few milliseconds after the test sends it, a request the ingress made before
    then still reaches the fake, and the fake may read it after the test has seen the process
    dead (both run on the test's loop); a burst of drafts at the moment of the kill makes that
    likely. Only the ingress that took a message in shows its drafts, so a draft of it shown
    then is that ingress's."""
    shown = shown_at(fake, chat, draft, ("sendMessage", "editMessageText"))
    resent = [at for a in answers if a.startswith(draft) for at in shown_at(fake, chat, a, SEND)]
    return any(
        s <= dead + LATE_REQUEST_S and signalled < r and s < r
        for s in shown
        for r in resent
        for signalled, dead in kills
    )


def timeline(
    fake: FakeTelegram, chat: int, texts: list[str], kills: list[tuple[float, float]]
) -> str:
    """What a failed assertion shows: when each copy of `texts` was sent or edited to, against
    when each kill was signalled and its process seen dead, all relative to the first kill
    (an unexplained copy is otherwise a text and nothing to go on)."""
    origin = kills[0][0] if kills else 0.0
    copies = sorted(
        (at - origin, method, text)
        for text in set(texts)
        for method in ("sendMessage", "editMessageText")
        for at in shown_at(fake, chat, text, (method,))
    )
    shown = "; ".join(f"{at:+.3f} s {method} {text!r}" for at, method, text in copies)
    killed = ", ".join(f"{s - origin:+.3f}..{d - origin:+.3f} s" for s, d in kills)
    return f"copies: {shown}; kills (signalled..dead): {killed}"


def text_of(chat: int, index: int) -> str:
    # The number first: a streamed reply's first half tells which answer it begins.
    return f"message {index:03d} of chat {chat} asks for its echo"


async def test_every_message_is_answered_once_in_order_across_cluster_sigkills(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str, streams: OwnStreams
) -> None:
    chooser = random.Random(20261202)
    chats = [91_001 + number for number in range(CHATS)]
    sent: list[tuple[int, str]] = []
    #: (when a kill was signalled, when its process was seen dead)
    kills: list[tuple[float, float]] = []
    ingress_kills: list[tuple[float, float]] = []
    async with FakeTelegram() as fake, processes() as running:
        config = cluster_config(
            tmp_path,
            # Replies stream: each final waits for its edit slot, kept short here.
            {fresh_scope(): polling_profile(fake, USER, AGENT, edit_interval_s=0.1)},
            prefix=nats_prefix,
            dsn=postgres_dsn,
            ack_wait_s=2,
            extra_nats=", max_deliver: 3",
        )
        workers: list[DaemonProcess] = [await start_role(config, "worker") for _ in range(WORKERS)]
        ingresses = [await start_role(config, "ingress") for _ in range(2)]
        running.extend([*workers, *ingresses])
        await ingresses[0].wait_log(lambda event: event.get("event") == "lease.acquired")

        async def talk() -> None:
            fake.push_message(chats[0], POISON, user_id=USER)
            for index in range(MESSAGES_PER_CHAT):
                for chat in chats:
                    fake.push_message(chat, text_of(chat, index), user_id=USER)
                    sent.append((chat, text_of(chat, index)))
                await asyncio.sleep(0.5)

        talking = asyncio.create_task(talk(), name="chaos-talker")
        for role in KILLS:
            await asyncio.sleep(chooser.uniform(0.5, 1.5))
            if role == "worker":
                victim = workers.pop(chooser.randrange(len(workers)))
            else:
                victim = next(i for i in ingresses if holds_lease(i))
                ingresses.remove(victim)
            signalled = time.monotonic()
            victim.signal(signal.SIGKILL)
            await victim.wait()
            kills.append((signalled, time.monotonic()))
            if role == "ingress":
                ingress_kills.append(kills[-1])
            replacement = await start_role(config, role)
            running.append(replacement)
            (workers if role == "worker" else ingresses).append(replacement)
        await talking
        # The leader was killed: one of the others takes its lease over (within seconds).
        takeovers = [
            asyncio.create_task(i.wait_log(lambda e: e.get("event") == "lease.acquired"))
            for i in ingresses
        ]
        _taken, waiting = await asyncio.wait(takeovers, return_when=asyncio.FIRST_COMPLETED)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)

        def all_answered() -> bool:
            shown = {str(m["text"]) for chat in chats for m in fake.bot_messages(chat)}
            return all(text in shown for _chat, text in sent)

        await fake.wait_until(all_answered, timeout_s=90)
        await fake.wait_until(lambda: fake.pending_update_ids == [], timeout_s=30)

        assert len(sent) == CHATS * MESSAGES_PER_CHAT
        sends = {
            (str(call.params.get("chat_id")), str(call.params.get("text"))): call.at
            for call in sorted(fake.calls("sendMessage"), key=lambda call: -call.at)
        }
        for chat in chats:
            expected = [text for to, text in sent if to == chat]
            shown = [str(message["text"]) for message in fake.bot_messages(chat)]
            answers = [text for text in shown if text in expected]
            extra = [text for text in shown if text not in expected]
            if chat == chats[0]:
                # The planted poison: buried after its deliveries, its chat told once.
                assert [t for t in extra if t.startswith("Sorry")] == [extra[0]], extra
                extra = extra[1:]
            drafts = [
                text
                for text in extra
                if any(answer.startswith(text) for answer in expected)
                and a_killed_draft(fake, chat, text, expected, ingress_kills)
            ]
            assert extra == drafts, timeline(fake, chat, extra, kills)
            # In the chat's order, even around a killed ingress: the next answer streams only
            # once the reply it was to show has been sent whole by the other one.
            assert dedupe(answers) == expected
            for text in {t for t in answers if answers.count(t) > 1}:
                assert explained_by_a_kill(sends.get((str(chat), text)), kills) or a_killed_draft(
                    fake, chat, text, [text], ingress_kills
                ), timeline(fake, chat, [text], kills)
        # Nothing left to do in the streams, but the dead letter the test planted (an ack that
        # a kill lost comes again after ack_wait_s: 2 s).
        assert await streams.left_once_settled("IN", timeout_s=10) == 0
        assert await streams.left_once_settled("OUT", timeout_s=10) == 0
        assert await streams.left_in("DEAD") == 1
        # The standby took the lease over from the killed leader.
        assert sum(holds_lease(i) for i in ingresses) == 1
        # The kills did land mid-flight: messages a dead worker held were delivered again.
        redelivered = [
            e for run in running for e in run.logs if e.get("event") == "cluster.redelivered"
        ]
        assert redelivered, "no kill interrupted a turn: the test proved nothing"
