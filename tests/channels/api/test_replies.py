"""The reply router's memory of recent replies (bounded in count, size and age), and a
request's wait for its final reply."""

from __future__ import annotations

from structlog.testing import capture_logs

from channels.api.replies import PendingReply, RecentReplies, ReplyEvent


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_recent_replies_are_bounded_in_count_size_and_age() -> None:
    clock = Clock()
    recent = RecentReplies(capacity=3, max_chars=10, ttl_s=60.0, clock=clock)
    for n in range(4):
        recent.put(("chat", str(n)), ReplyEvent("done", "ab"))
    assert recent.get(("chat", "0")) is None  # over the count: the oldest went
    assert recent.get(("chat", "3")) == ReplyEvent("done", "ab")
    recent.put(("chat", "big"), ReplyEvent("done", "x" * 9))
    assert recent.get(("chat", "big")) is not None
    assert [recent.get(("chat", str(n))) for n in (1, 2, 3)] == [None, None, None]
    recent.put(("chat", "huge"), ReplyEvent("done", "y" * 11))  # larger than the whole budget
    assert recent.get(("chat", "huge")) is None
    recent.put(("other", "1"), ReplyEvent("done", "z"))
    clock.now = 61.0
    assert recent.get(("other", "1")) is None  # too old


def test_a_key_put_again_replaces_its_reply() -> None:
    recent = RecentReplies(capacity=3, max_chars=10)
    recent.put(("c", "1"), ReplyEvent("done", "aaaa"))
    recent.put(("c", "1"), ReplyEvent("error", "bbbb"))
    recent.put(("c", "2"), ReplyEvent("done", "cccc"))
    assert recent.get(("c", "1")) == ReplyEvent("error", "bbbb")
    assert recent.get(("c", "2")) == ReplyEvent("done", "cccc")


async def test_the_final_reply_is_waited_for_past_the_snapshots() -> None:
    pending = PendingReply(("chat", "1"))
    for event in (ReplyEvent("snapshot", "a"), ReplyEvent("snapshot", "ab")):
        pending.events.put_nowait(event)
    pending.events.put_nowait(ReplyEvent("done", "abc"))
    assert await pending.final(60.0) == ReplyEvent("done", "abc")


async def test_no_final_reply_in_time_is_none_and_logged() -> None:
    pending = PendingReply(("chat", "1"))
    pending.events.put_nowait(ReplyEvent("snapshot", "a"))
    with capture_logs() as logs:
        assert await pending.final(0.01) is None
    assert [(log["event"], log["chat"]) for log in logs] == [("api.reply_timeout", "chat")]
