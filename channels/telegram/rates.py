"""Telegram's published send rates, which the manager's scheduler keeps every call within.

Telegram Bot FAQ, "My bot is hitting limits, how do I avoid this?"
(https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this): "When sending
messages inside a particular chat, avoid sending more than one message per second. We may allow
short bursts that go over this limit, but eventually you'll begin receiving 429 errors. If
you're sending bulk notifications to multiple users, the API will not allow more than 30
messages per second or so. ... your bot will not be able to send more than 20 messages per
minute to the same group." Edits count like messages here: the FAQ does not exempt them, and
flood waits on edit streams are the most reported failure.
"""

from __future__ import annotations

from channels.pacing import Rate, RateLimits

RATE_LIMITS = RateLimits(
    account=Rate(30, 1.0),
    chat=Rate(1, 1.0),
    group=Rate(20, 60.0),
)


def is_group_chat(chat_id: str) -> bool:
    """Groups, supergroups and channels have negative ids; a user's private chat a positive one."""
    return chat_id.startswith("-")
