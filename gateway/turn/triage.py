"""Triage: what a message is, decided as soon as it is durable and before anything runs.

- a **stop** (`/stop`, or an abort word such as "stop" or "取消" as the whole message) cancels
  the chat's running turn and is answered at once, in the language of the word;
- an **immediate** command only reads state (`/help`, `/status`, `/sessions`): answered at
  once, even while a turn runs;
- any other **command** (`/new`, `/s`, `/reset`, an unknown one) changes which session the chat
  talks to, so it waits its turn behind the chat's earlier messages;
- everything else is **text**: an agent turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
