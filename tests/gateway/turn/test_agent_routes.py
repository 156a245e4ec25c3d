"""Which of a profile's agents answers a message: the message's own choice, the chat's, the
first route that fits, `default`; a prefix route takes its prefix off the text."""

from __future__ import annotations

from typing import Any

import pytest

from bus import AGENT, InboundMessage
from channels.media_info import chat_kind
from config import ProfileConfig
from gateway.turn.triage import AgentRoutes

ROUTES = AgentRoutes(
    ProfileConfig.model_validate(
        {
            "agents": {"coder": {"type": "echo"}, "support": {"type": "echo"}},
            "routes": [
                {"match": {"sender": ["boss"]}, "agent": "support"},
                {"match": {"prefix": "/code"}, "agent": "coder"},
                {"match": {"channel": "telegram", "chat_type": "group"}, "agent": "coder"},
                {"match": {"channel": "slack", "chat": ["C1"]}, "agent": "support"},
            ],
            "agent_switch": True,
        }
    )
)


def message(
    text: str, *, channel: str = "telegram", chat: str = "1", sender: str = "ann", **meta: Any
) -> InboundMessage:
    return InboundMessage(
        channel=channel, sender_id=sender, chat_id=chat, content=text, metadata=meta
    )


def test_a_prefix_route_names_its_agent_and_leaves_the_rest_of_the_text() -> None:
    addressed = ROUTES.addressed(message("  /code  fix the bug "))
    assert addressed.content == "fix the bug"
    assert addressed.metadata[AGENT] == "coder"
    assert ROUTES.agent_for(addressed, chosen="support") == "coder"


@pytest.mark.parametrize("text", ["/codex", "/coder please", "say /code"])
def test_a_prefix_matches_only_as_a_leading_word(text: str) -> None:
    assert ROUTES.addressed(message(text)).content == text


def test_the_first_route_that_fits_wins_even_over_a_later_prefix() -> None:
    from_boss = ROUTES.addressed(message("/code now", sender="boss"))
    assert from_boss.content == "/code now"
    assert ROUTES.agent_for(from_boss) == "support"


@pytest.mark.parametrize(
    ("inbound", "agent"),
    [
        (message("hi", chat_type="supergroup"), "coder"),
        (message("hi", chat_type="private"), "default"),
        (message("hi", channel="slack", chat="C1", is_dm=False), "support"),
        (message("hi", channel="slack", chat="C2", is_dm=False), "default"),
        (message("hi", channel="matrix", chat="!room"), "default"),
    ],
)
def test_routes_by_channel_chat_and_chat_type(inbound: InboundMessage, agent: str) -> None:
    assert ROUTES.agent_for(ROUTES.addressed(inbound)) == agent


def test_the_message_choice_beats_the_chats_which_beats_the_routes() -> None:
    group = message("hi", chat_type="group")
    assert ROUTES.agent_for(group, chosen="support") == "support"
    named = message("hi", chat_type="group", **{AGENT: "default"})
    assert ROUTES.agent_for(named, chosen="support") == "default"
    assert ROUTES.agent_for(group, chosen="gone") == "coder"


def test_a_chats_choice_counts_only_where_chats_may_choose() -> None:
    fixed = AgentRoutes(ProfileConfig.model_validate({"agents": {"coder": {"type": "echo"}}}))
    assert fixed.agent_for(message("hi"), chosen="coder") == "default"


@pytest.mark.parametrize(
    ("inbound", "kind"),
    [
        (message("x", chat_type="channel"), "group"),
        (message("x", channel="feishu", feishu_chat_type="p2p"), "private"),
        (message("x", channel="qq", chat_type="c2c"), "private"),
        (message("x", channel="wecom_bot", chat_type="single"), "private"),
        (message("x", channel="discord", is_dm=True), "private"),
        (message("x", channel="line", chat="Uabc"), "private"),
        (message("x", channel="line", chat="Cabc"), "group"),
        (message("x", channel="email"), "private"),
        (message("x", channel="matrix"), None),
    ],
)
def test_chat_kind_of_each_channel(inbound: InboundMessage, kind: str | None) -> None:
    assert chat_kind(inbound) == kind
