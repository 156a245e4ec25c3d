"""Commands in a cluster run exactly once: their effect and their stored reply are one
PostgreSQL transaction, so a worker that dies between the two (here: fails right after the
effect, inside the transaction) leaves neither, and the redelivery runs the command once.

Without that, `/back` would switch back twice (landing where it started) and an unnamed `/new`
would fork a second session from the first."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg
import pytest
from nats.aio.client import Client

from bus import Message, OutboundMessage
from gateway.cluster.profile_worker import WorkerProfile
from gateway.cluster.turn_records import AnsweredElsewhere, TurnRecord, TurnRecords
from tests.cluster.harness import RunningWorker, running_worker
from tests.cluster.test_shared_chat_state import message, two_workers
from tests.cluster.test_worker import reply_texts
from tests.support.postgres import fresh_scope

if TYPE_CHECKING:
    from sessions.postgres.connect import Connection

CHAT = "chat-1"


@dataclass
class DyingWorker:
    worker: RunningWorker
    profile: str
    #: The failures injected (one at most).
    failures: list[str]

    async def replies_to(self, *texts: str) -> list[str]:
        """Send `texts` to the chat in order; the reply texts once all are acknowledged."""
        w = self.worker
        for text in texts:
            await w.publish(message(text))
        await w.observer.wait_for(lambda: len(w.acks()) == len(texts))
        assert self.failures, "the failure was never injected"
        return reply_texts(w)


@asynccontextmanager
async def dying_once_after(
    reply_prefix: str,
    effect: Callable[[tuple[str | None, str | None]], bool],
    *,
    backoff_s: float,
    fixtures: tuple[Client, str, str, Path],
) -> AsyncIterator[DyingWorker]:
    """A worker that fails once, right after the command whose reply starts with
    `reply_prefix` has had its effect and before its reply is stored: `effect` says, of the
    chat's topics as the command's transaction sees them, that the effect is there."""
    client, prefix, dsn, tmp_path = fixtures
    profile = fresh_scope()
    async with running_worker(
        client, prefix, dsn, profile, tmp_path, retry_backoff_s=[backoff_s]
    ) as worker:
        stored = worker.records.answer
        failures: list[str] = []

        async def answer_or_die(
            record: TurnRecord,
            session_key: str,
            reply: OutboundMessage,
            messages: list[Message],
            *,
            joined: Sequence[tuple[str, int]] = (),
            connection: Connection | None = None,
            appended: bool = False,
        ) -> TurnRecord:
            if reply.content.startswith(reply_prefix) and not failures:
                assert connection is not None  # a command's reply joins its effect's transaction
                assert effect(await topics_of(connection, profile))
                failures.append("the worker died between the effect and the reply")
                raise RuntimeError(failures[-1])
            return await stored(
                record,
                session_key,
                reply,
                messages,
                joined=joined,
                connection=connection,
                appended=appended,
            )

        # Replaced on this one worker's records, as the test's own failure, on purpose.
        worker.records.answer = answer_or_die  # type: ignore[method-assign]
        yield DyingWorker(worker, profile, failures)


async def topics_of(connection: Connection, profile: str) -> tuple[str | None, str | None]:
    row = await connection.fetchrow(
        "SELECT active, previous FROM octos_active_topics WHERE scope = $1 AND base_key = $2",
        profile,
        f"{profile}:telegram:{CHAT}",
    )
    return (None, None) if row is None else (row["active"], row["previous"])


async def live_topics(dsn: str, profile: str) -> list[str | None]:
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT topic FROM octos_sessions WHERE scope = $1 AND archived_at IS NULL "
            "ORDER BY topic NULLS FIRST",
            profile,
        )
    finally:
        await connection.close()
    return [row["topic"] for row in rows]


async def committed_topics(dsn: str, profile: str) -> tuple[str | None, str | None]:
    connection = await asyncpg.connect(dsn)
    try:
        return await topics_of(connection, profile)
    finally:
        await connection.close()


async def test_a_back_whose_reply_was_not_stored_switches_back_once(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> None:
    async with dying_once_after(
        "Back to",
        lambda topics: topics == (None, "work"),
        backoff_s=0.05,
        fixtures=(nats_client, nats_prefix, postgres_dsn, tmp_path),
    ) as dying:
        texts = await dying.replies_to("/new work", "/back")
        assert len(dying.worker.acks(b"-NAK")) == 1  # the /back, delivered again
        assert texts[0].startswith("New session 'work'")
        assert texts[1:] == ["Back to 'default'."]
    # Once: on the default session, `work` the previous one (twice would be back on `work`).
    assert await committed_topics(postgres_dsn, dying.profile) == (None, "work")


async def test_an_unnamed_new_whose_reply_was_not_stored_forks_once(
    nats_client: Client, nats_prefix: str, postgres_dsn: str, tmp_path: Path
) -> None:
    # The backoff (over a second) gives the redelivery another timestamp, hence another name:
    # had the first fork stayed, there would be two.
    async with dying_once_after(
        "New session",
        lambda topics: (topics[0] or "").startswith("s"),
        backoff_s=1.1,
        fixtures=(nats_client, nats_prefix, postgres_dsn, tmp_path),
    ) as dying:
        texts = await dying.replies_to("hello", "/new")
        assert texts[0] == "hello"
        (made,) = texts[1:]
        assert made.endswith("(kept the last 2 messages as context).")
    topics = await live_topics(postgres_dsn, dying.profile)
    assert len(topics) == 2, topics
    assert topics[0] is None
    assert f"New session {topics[1]!r}" in made
    assert (await committed_topics(postgres_dsn, dying.profile))[0] == topics[1]


async def test_a_command_another_worker_answered_meanwhile_is_rolled_back(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Two workers ran the same message (its copy was redelivered while the first still ran):
    the second finds the reply stored when it stores its own, and its effect is undone."""
    records = TurnRecords(postgres_dsn)
    await records.open()
    try:
        async with two_workers(postgres_dsn, tmp_path) as (first, second):
            profile = first.profile_id
            record = await records.claim(profile, "the-back", 1)
            await answer_stored(first, records, record, "/new work")
            with pytest.raises(AnsweredElsewhere) as raised:
                await answer_stored(second, records, record, "/back")
            assert raised.value.stored.reply is not None
            assert raised.value.stored.reply.content.startswith("New session 'work'")
            assert await committed_topics(postgres_dsn, profile) == ("work", "")
    finally:
        await records.close()


async def answer_stored(
    worker: WorkerProfile, records: TurnRecords, record: TurnRecord, text: str
) -> TurnRecord:
    """What the cluster worker does with a command: answer and store it in one transaction."""
    incoming = message(text)
    async with worker.effect_transaction(incoming) as connection:
        assert connection is not None
        given = await worker.answer([incoming], record.turn_id)
        reply = OutboundMessage(channel="telegram", chat_id=CHAT, content=given.text)
        return await records.answer(
            record, str(given.session_key), reply, [], connection=connection
        )
