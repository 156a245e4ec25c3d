"""QQ's message buttons (`keyboard: true`): the keyboard under a reply, and what a tap brings back.

QQ bot open platform, 消息按钮 (https://bot.q.qq.com/wiki/develop/api-v2/server-inter/message/trans/msg-btn.html):
buttons hang only under a Markdown message (`msg_type` 2, `markdown: {"content"}`), as
`keyboard: {"content": {"rows": [{"buttons": [...]}]}}`, at most 5 rows of 5 buttons. A custom
keyboard is open only to bots QQ invited to it, and a passive Markdown reply needs a grant of
its own: so the channel sends one only when its config says the bot has them. Each button has
an `id` unique in its keyboard, `render_data {label, visited_label, style}` and `action {type,
permission, data, unsupport_tips}`: type 1 a callback button, whose `data` comes back with the
tap; type 0 a link, whose `data` is the URL; permission type 2, anyone in the chat may tap it.

A tap is the event INTERACTION_CREATE (intent 1 << 26), which names the button's `data` and
`id` but the message that held it only in a guild (`data.resolved.message_id`); so a callback
button's data carries what the gateway needs besides the agent's data (`callback_data`): the
message's name (our own: the reply's delivery id, the same on a resend, as LINE's postbacks do),
when it was sent (`buttons_ttl_s` counts from then) and the label (the tap's text).

A tap is not a message, so a reply to it names the event (`event_id`: the dispatch's own `id`,
QQ's "前置收到的事件 ID") instead of a `msg_id`; the tap's message id is `tap:<event id>`, which
`reply_target` turns back into that.
"""

from __future__ import annotations

from typing import Any

from bus import Button, ButtonRows
from channels.buttons import ButtonLimits, packed_tap

INTERACTION_EVENT = "INTERACTION_CREATE"
#: The intent a websocket session needs to be sent INTERACTION_CREATE.
INTERACTION_INTENT = 1 << 26
#: An interaction's `type` for a message button (12 is a C2C quick menu, 13 its feedback).
BUTTON_INTERACTION = 11
#: What a tap's message id starts with: the rest is the event id a reply names.
TAP_PREFIX = "tap:"

#: 5 rows of 5; QQ states no limit for a label (it shortens a long one itself) or for `data`.
KEYBOARD_LIMITS = ButtonLimits(max_rows=5, max_per_row=5)
LINK_ACTION, CALLBACK_ACTION = 0, 1
ANYONE_MAY_TAP = 2
GREY, BLUE = 0, 1
#: The toast of a QQ too old to take a button's action (a required field).
UNSUPPORTED_TIPS = "This QQ version cannot use this button: please update QQ."


def callback_data(held_id: str, data: str, label: str, sent_at: int) -> str:
    """A callback button's `data`: the message that holds it (`held_id`), the agent's data, when
    it was sent and the label (`channels.buttons.packed_tap`)."""
    return packed_tap({"m": held_id, "d": data, "s": sent_at, "t": label})


def _is_link(button: Button) -> bool:
    return button.url is not None and button.data is None


def _button(number: int, button: Button, held_id: str, sent_at: int) -> dict[str, Any]:
    if _is_link(button):
        kind, style, data = LINK_ACTION, GREY, str(button.url)
    else:
        kind, style = CALLBACK_ACTION, BLUE
        data = callback_data(held_id, button.data or button.text, button.text, sent_at)
    return {
        "id": str(number),
        "render_data": {"label": button.text, "visited_label": button.text, "style": style},
        "action": {
            "type": kind,
            "permission": {"type": ANYONE_MAY_TAP},
            "data": data,
            "unsupport_tips": UNSUPPORTED_TIPS,
        },
    }


def keyboard(buttons: ButtonRows, held_id: str, sent_at: int) -> dict[str, Any]:
    """The `keyboard` field of a reply with `buttons` (already fitted to `KEYBOARD_LIMITS`)."""
    numbers = iter(range(1, 1 + sum(len(row) for row in buttons)))
    rows = [
        {"buttons": [_button(next(numbers), button, held_id, sent_at) for button in row]}
        for row in buttons
        if row
    ]
    return {"content": {"rows": rows}}


def with_labels(content: str, buttons: ButtonRows) -> str:
    """The reply as plain text when QQ refused its keyboard: the choices' labels (which the user
    can type back) and the links, after the text."""
    choices = [button.text for row in buttons for button in row if not _is_link(button)]
    links = [f"{b.text}: {b.url}" for row in buttons for b in row if _is_link(b)]
    lines = ([" | ".join(choices)] if choices else []) + links
    if not lines:
        return content
    listed = "\n".join(lines)
    return f"{content.rstrip()}\n\n{listed}" if content.strip() else listed


def reply_target(answered_id: str) -> dict[str, str]:
    """What names the user's message (`msg_id`) or tap (`event_id`) a reply answers."""
    if answered_id.startswith(TAP_PREFIX):
        return {"event_id": answered_id.removeprefix(TAP_PREFIX)}
    return {"msg_id": answered_id}
