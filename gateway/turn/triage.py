"""Triage: what a message is, decided as soon as it is durable and before anything runs.

- a **stop** (`/stop`, or an abort word such as "stop" or "取消" as the whole message) cancels
  the chat's running turn and is answered at once, in the language of the word;
- an **immediate** command only reads state (`/help`, `/status`, `/sessions`): answered at
  once, even while a turn runs;
- any other **command** (`/new`, `/s`, `/reset`, an unknown one) changes which session the chat
  talks to, so it waits its turn behind the chat's earlier messages;
- everything else is **text**: an agent turn.

Which of the profile's agents answers is decided here too (`AgentRoutes`): a route with a
`prefix` is the message's own choice, taken off its text before anything else reads it.

A user's edit of their message (`bus.EDIT`) is triaged on its new text: an edit into a stop or
a command is never run (an edited `/reset` is not a second reset). One that comes after its
message's turn started is answered as a message of its own, marked so (`edit_as_new_turn`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bus import AGENT, InboundMessage
from bus.abort import abort_language
from channels.media_info import chat_kind
from config import DEFAULT_AGENT, AgentRoute, ProfileConfig, RouteMatch

MessageKind = Literal["stop", "immediate", "command", "text"]

#: Commands that only read state: answered at once, even while a turn runs.
IMMEDIATE = frozenset({"/help", "/status", "/sessions", "/stop"})

_ALIASES = {"/switch": "/s", "/b": "/back", "/d": "/delete"}


@dataclass(frozen=True, slots=True)
class Triage:
    kind: MessageKind
    #: The command's name as the commands know it (`/cmd@Bot` read as `/cmd`, aliases
    #: resolved); empty for text and for an abort word.
    command: str = ""
    argument: str = ""


_TEXT = Triage("text")
_ABORT_WORD = Triage("stop")


def triage(content: str) -> Triage:
    """What the message whose text is `content` is."""
    if abort_language(content) is not None:
        return _ABORT_WORD
    command = _parse_command(content)
    if command is None:
        return _TEXT
    name, argument = command
    if name == "/stop":
        return Triage("stop", name, argument)
    return Triage("immediate" if name in IMMEDIATE else "command", name, argument)


def _parse_command(text: str) -> tuple[str, str] | None:
    """`("/name", "argument")` for a command, None for ordinary text.

    `/cmd@BotName` (Telegram's form in groups) is read as `/cmd`; a text starting with `//`
    (a protocol-relative URL, a code comment) is not a command.
    """
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    head, _, argument = stripped.partition(" ")
    name = head.split("@", 1)[0].lower()
    return _ALIASES.get(name, name), argument.strip()


class AgentRoutes:
    """Which of a profile's agents answers a message, in this order: the one the message names
    (`bus.AGENT`: the API's `model`, or the agent of the prefix route that addressed it), the
    one its chat chose with `/agent` (when `agent_switch` lets it), the first route that fits,
    `default`. One process and the cluster's workers both ask this."""

    def __init__(self, config: ProfileConfig) -> None:
        self.names: tuple[str, ...] = tuple(config.named_agents())
        self.switchable = config.agent_switch
        self._routes: tuple[AgentRoute, ...] = tuple(config.routes)
        #: Only a message that names its agent (`bus.AGENT`) is answered by another than
        #: `default`: no routes, no chat's choice (a turn then asks nothing more).
        self.always_default = not self._routes and not self.switchable
        #: Some route takes a prefix off the text (else `addressed` changes no message).
        self.has_prefixes = any(route.match.prefix is not None for route in self._routes)

    def addressed(self, message: InboundMessage) -> InboundMessage:
        """`message` as the turn reads it: when the first route that fits it has a prefix, the
        prefix is taken off its text and its agent named in its metadata; else unchanged."""
        if not self._routes or AGENT in message.metadata:
            return message
        route = self._first_fitting(message)
        if route is None or route.match.prefix is None:
            return message
        rest = _after_prefix(message.content, route.match.prefix)
        assert rest is not None  # the route fitted
        metadata = {**message.metadata, AGENT: route.agent}
        return message.model_copy(update={"content": rest, "metadata": metadata})

    def agent_for(self, message: InboundMessage, chosen: str | None = None) -> str:
        """The agent that answers `message` (already `addressed`); `chosen`: its chat's choice."""
        named = message.metadata.get(AGENT)
        if isinstance(named, str) and named in self.names:
            return named
        if chosen is not None and self.switchable and chosen in self.names:
            return chosen
        route = self._first_fitting(message)
        return DEFAULT_AGENT if route is None else route.agent

    def _first_fitting(self, message: InboundMessage) -> AgentRoute | None:
        return next((route for route in self._routes if _fits(route.match, message)), None)


def _fits(match: RouteMatch, message: InboundMessage) -> bool:
    if match.channel is not None and match.channel != message.channel:
        return False
    if match.chat and message.chat_id not in match.chat:
        return False
    if match.sender and message.sender_id not in match.sender:
        return False
    if match.chat_type is not None and chat_kind(message) != match.chat_type:
        return False
    return match.prefix is None or _after_prefix(message.content, match.prefix) is not None


def _after_prefix(text: str, prefix: str) -> str | None:
    """The text after `prefix` when `text` starts with it as a word (`/code fix` and `/code`,
    not `/codex`); None when it does not."""
    stripped = text.lstrip()
    if not stripped.startswith(prefix):
        return None
    rest = stripped[len(prefix) :]
    if rest and not rest[0].isspace():
        return None
    return rest.strip()


#: How an edit answered as a message of its own reads to the agent: the new text, then the
#: start of the earlier one where it is known.
EDITED_MARK = "[edited]"


def edit_runs(edit: InboundMessage) -> bool:
    """Whether the edit `edit` may reach an agent: only as text, never as a command or a stop."""
    return triage(edit.content).kind == "text"


def edit_as_new_turn(edit: InboundMessage, earlier: str | None) -> InboundMessage:
    """The edit as a message of its own (its message's turn has started, or is done)."""
    content = f"{EDITED_MARK} {edit.content}"
    if earlier:
        shown = earlier if len(earlier) < 100 else earlier[:99] + "…"
        content += f'\n(earlier: "{shown}")'
    return edit.model_copy(update={"content": content})
