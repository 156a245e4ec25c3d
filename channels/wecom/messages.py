"""WeCom callback XML: the outer envelope with `<Encrypt>`, and the message inside it.

The outer XML arrives before anything is verified, so it is parsed only after refusing any
document type declaration (no entity tricks), with the standard library's expat parser (which
never fetches external entities).
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass

from bus import InboundMessage

CHANNEL = "wecom"
#: The message types whose text the agent can read; others are acknowledged and skipped.
TEXT_TYPES = frozenset({"text"})


class MalformedCallback(ValueError):
    """XML WeCom would not send."""


def _parse(xml: bytes) -> ElementTree.Element:
    if b"<!DOCTYPE" in xml.upper() or b"<!ENTITY" in xml.upper():
        raise MalformedCallback("document type declarations are not accepted")
    try:
        return ElementTree.fromstring(xml)
    except ElementTree.ParseError as exc:
        raise MalformedCallback(f"not XML: {exc}") from exc


def _text(root: ElementTree.Element, tag: str) -> str:
    node = root.find(tag)
    return (node.text or "").strip() if node is not None else ""


def encrypted_field(xml: bytes) -> str:
    """The base64 `<Encrypt>` of a callback body."""
    encrypted = _text(_parse(xml), "Encrypt")
    if not encrypted:
        raise MalformedCallback("no <Encrypt> element")
    return encrypted


@dataclass(frozen=True, slots=True)
class WeComMessage:
    """One decrypted callback: a user's message to the application, or an event."""

    msg_type: str
    sender: str
    create_time: int
    content: str
    msg_id: str
    agent_id: str
    event: str

    @property
    def dedup_id(self) -> str:
        """MsgId for messages; events have none, so sender and time stand in."""
        return self.msg_id or f"{self.sender}:{self.create_time}:{self.event}"

    # WeCom's message onto InboundMessage's fields: every channel writes this mapping, alike in
    # shape, with its own sources.
    def to_inbound(self) -> InboundMessage:
        return InboundMessage(
            channel=CHANNEL,
            sender_id=self.sender,
            chat_id=self.sender,
            content=self.content,
            message_id=self.dedup_id,
            metadata={"wecom_agent_id": self.agent_id, "wecom_msg_type": self.msg_type},
        )


def read_message(xml: bytes) -> WeComMessage:
    root = _parse(xml)
    sender = _text(root, "FromUserName")
    msg_type = _text(root, "MsgType")
    if not sender or not msg_type:
        raise MalformedCallback("a message needs FromUserName and MsgType")
    created = _text(root, "CreateTime")
    return WeComMessage(
        msg_type=msg_type,
        sender=sender,
        create_time=int(created) if created.isdigit() else 0,
        content=_text(root, "Content"),
        msg_id=_text(root, "MsgId"),
        agent_id=_text(root, "AgentID"),
        event=_text(root, "Event"),
    )
