"""The book of handled chats that Discord's catch-up reads after a restart."""

from __future__ import annotations

from pathlib import Path

from channels.discord.catchup import DISCORD_EPOCH_MS, HandledBook, snowflake_time_s


def snowflake_at(seconds: float) -> int:
    return int(seconds * 1000 - DISCORD_EPOCH_MS) << 22


async def test_the_newest_handled_message_per_chat_survives_a_restart(tmp_path: Path) -> None:
    now = 1_800_000_000.0
    path = tmp_path / "handled.json"
    book = HandledBook(path, clock=lambda: now)
    book.handled("1", snowflake_at(now - 10))
    book.handled("1", snowflake_at(now - 20))  # older: ignored
    book.handled("2", snowflake_at(now - 5))
    await book.save()

    again = HandledBook(path, clock=lambda: now)
    await again.load()
    assert again.recent() == {"1": snowflake_at(now - 10), "2": snowflake_at(now - 5)}
    assert abs(snowflake_time_s(snowflake_at(now - 10)) - (now - 10)) < 0.001


async def test_chats_quiet_for_a_day_are_not_caught_up(tmp_path: Path) -> None:
    now = 1_800_000_000.0
    book = HandledBook(tmp_path / "handled.json", clock=lambda: now)
    book.handled("old", snowflake_at(now - 25 * 3600))
    book.handled("fresh", snowflake_at(now - 3600))
    assert list(book.recent()) == ["fresh"]


async def test_an_unreadable_book_is_reported_and_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "handled.json"
    path.write_text("{not json")
    book = HandledBook(path)
    await book.load()
    assert book.recent() == {}
