"""Two workers' profiles over one database answer the same chat in turn (as partitions move
between workers): each reads the chat's state as the other left it, never its own memory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from prometheus_client import CollectorRegistry

from bus import InboundMessage
from config import ProfileConfig
from config.store import StoreConfig
from gateway.cluster.profile_worker import WorkerProfile, worker_profile
from gateway.metrics import GatewayMetrics
from tests.support.postgres import fresh_scope


def message(text: str) -> InboundMessage:
    return InboundMessage(
        channel="telegram", sender_id="7", chat_id="chat-1", content=text, message_id=text
    )


@asynccontextmanager
async def two_workers(dsn: str, tmp_path: Path) -> AsyncIterator[list[WorkerProfile]]:
    """One profile opened twice, as two worker processes open it (data directories apart)."""
    profile = fresh_scope()
    config = ProfileConfig.model_validate({"agent": {"type": "echo"}})
    store = StoreConfig.model_validate({"backend": "postgres", "dsn": dsn})
    async with AsyncExitStack() as stack:
        workers = [
            await stack.enter_async_context(
                worker_profile(
                    profile,
                    config,
                    tmp_path / f"worker-{n}",
                    store,
                    GatewayMetrics.create(CollectorRegistry()),
                )
            )
            for n in range(2)
        ]
        yield workers


async def answer(worker: WorkerProfile, text: str) -> str:
    """Answer as the cluster worker does: the answer, then its session messages stored."""
    given = await worker.answer([message(text)], f"turn-{text}")
    if given.messages:
        await worker.append(str(given.session_key), given.messages)
    return given.text


async def test_a_topic_switched_on_one_worker_is_used_by_the_other(
    postgres_dsn: str, tmp_path: Path
) -> None:
    async with two_workers(postgres_dsn, tmp_path) as (first, second):
        assert (await answer(first, "/new work")).startswith("New session 'work'")
        given = await second.answer([message("hello")], "turn-hello")
        assert str(given.session_key).endswith(":telegram:chat-1#work")
        assert (await answer(second, "/back")) == "Back to 'default'."
        given = await first.answer([message("again")], "turn-again")
        assert str(given.session_key).endswith(":telegram:chat-1")


async def test_a_worker_reads_the_history_another_worker_wrote(
    postgres_dsn: str, tmp_path: Path
) -> None:
    async with two_workers(postgres_dsn, tmp_path) as (first, second):
        await answer(first, "one")  # the first worker now holds the session in memory
        await answer(second, "two")
        assert "(4 messages)" in await answer(first, "/status")
        await answer(second, "/reset")
        assert "(0 messages)" in await answer(first, "/status")
