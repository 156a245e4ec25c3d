"""The exactly-once record's durability: which writes wait for the disk, on real PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bus import OutboundMessage
from gateway.cluster.turn_records import TurnRecords
from tests.support.postgres import fresh_scope

if TYPE_CHECKING:
    from sessions.postgres.connect import Connection


async def commit_setting(connection: Connection) -> str:
    value = await connection.fetchval("SHOW synchronous_commit")
    assert isinstance(value, str)
    return value


async def test_a_claim_does_not_wait_for_the_disk_but_every_outcome_does(
    postgres_dsn: str,
) -> None:
    records = TurnRecords(postgres_dsn)
    await records.open()
    try:
        scope = fresh_scope()
        record = await records.claim(scope, "m1", 1)
        # What the pool's connections run by themselves (a claim) commits asynchronously ...
        async with records._connected().acquire() as connection:
            assert await commit_setting(connection) == "off"
        # ... and an outcome stored on them synchronously, as the sessions' writes are.
        async with records._transaction(None) as connection:
            assert await commit_setting(connection) == "on"
        reply = OutboundMessage(channel="api", chat_id="c", content="the reply")
        answered = await records.answer(record, f"{scope}:api:c", reply, [])
        assert answered.answered
        settled = await records.settle(await records.claim(scope, "m2", 2), "stop")
        assert settled.settled == "stop"
    finally:
        await records.close()
