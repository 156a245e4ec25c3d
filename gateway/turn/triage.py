"""Triage: what a message is, decided as soon as it is durable and before anything runs.

- a **stop** (`/stop`, or an abort word such as "stop" or "取消" as the whole message) cancels
  the chat's running turn and is answered at once, in the language of the word;
- an **immediate** command only reads state (`/help`, `/status`, `/sessions`): answered at
  once, even while a turn runs;
- any other **command** (`/new`, `/s`, `/reset`, an unknown one) changes which session the chat
  talks to, so it waits its turn behind the chat's earlier messages;
- everything else is **text**: an agent turn.

A user's edit of their message (`bus.EDIT`) is triaged on its new text: an edit into a stop or
a command is never run (an edited `/reset` is not a second reset). One that comes after its
message's turn started is answered as a message of its own, marked so (`edit_as_new_turn`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bus import InboundMessage
from bus.abort import abort_language

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
