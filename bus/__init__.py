"""The domain language of octos-gateway (octos-core) and its in-process message bus."""

from bus.envelope import TYPING, InboundMessage, OutboundMessage
from bus.identity import ClientMessageId, ThreadId, TurnId, new_turn_id, thread_rooted_at
from bus.message import Message, MessageRole, ToolCall, WireModel
from bus.pipe import PipeClosed, PipeReceiver, PipeSender, pipe
from bus.queue import AgentHandle, BusPublisher, InboundSender, create_bus
from bus.session_key import KNOWN_CHANNELS, MAIN_PROFILE, SessionKey, is_channel_name
from bus.usage import TokenUsage

__all__ = [
    "KNOWN_CHANNELS",
    "MAIN_PROFILE",
    "TYPING",
    "AgentHandle",
    "BusPublisher",
    "ClientMessageId",
    "InboundMessage",
    "InboundSender",
    "Message",
    "MessageRole",
    "OutboundMessage",
    "PipeClosed",
    "PipeReceiver",
    "PipeSender",
    "SessionKey",
    "ThreadId",
    "TokenUsage",
    "ToolCall",
    "TurnId",
    "WireModel",
    "create_bus",
    "is_channel_name",
    "new_turn_id",
    "pipe",
    "thread_rooted_at",
]
