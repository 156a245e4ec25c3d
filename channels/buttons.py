"""A reply's buttons, fitted to a platform and shown where it has none.

The agent's buttons (`bus.Button`, rows of them) are cut to what the platform takes
(`ButtonLimits`: rows, buttons per row, label and data lengths) before a channel renders them,
with a warning once per profile and limit: never a refused send that loses the reply's text.
Where a platform has no buttons (`Channel.buttons_shown == "numbered"`), or refused them, the
reply ends with a numbered list ("Reply 1 for Approve, 2 for Deny"); the intake takes a message
of just that number as the tap (`gateway.turn.intake`).

A tap on a message whose buttons were tapped already (`buttons_single_use`), or after
`buttons_ttl_s`, is answered with `BUTTON_ALREADY_USED` or `BUTTON_EXPIRED` and reaches no agent:
checked by the intake in one process, by the worker that takes the tap's turn in a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from bus import BUTTON_DATA_MAX_BYTES, CALLBACK, TAPPED_SENT_AT, Button, ButtonRows, InboundMessage
from bus.text import truncate_utf8

log = structlog.get_logger(__name__)

#: What a platform that can answer a tap itself (a toast, an ephemeral message) tells a tap no
#: current button of the bot's message sent.
TAP_NOT_AVAILABLE = "Already answered: these buttons are no longer available."
#: What a tap on a message whose buttons were tapped already is answered.
BUTTON_ALREADY_USED = "Already answered: these buttons were used."
#: What a tap after `buttons_ttl_s` is answered.
BUTTON_EXPIRED = "Already answered: these buttons have expired."


def tap_metadata(data: str, held_id: str | None, sent_at: float | None) -> dict[str, object]:
    """The metadata of a tap on the button holding `data` under the bot's message `held_id`,
    sent at `sent_at` (seconds since the epoch): what `tapped_message` and `tap_expired` read.
    Either may be unknown (None): a tap of no known message, or of no known age."""
    metadata: dict[str, object] = {CALLBACK: {"data": data, "message_id": held_id}}
    if sent_at is not None:
        metadata[TAPPED_SENT_AT] = sent_at
    return metadata


def packed_tap(
    fields: dict[str, object],
    *,
    droppable: Sequence[str] = (),
    fits: Callable[[str], bool] = lambda _packed: True,
) -> str:
    """A button's data as compact JSON, for a platform whose tap names neither the message nor
    the button: `d` the agent's data, `m` the bot message that holds it, `s` when it was sent,
    `t` its label, and what else the platform needs. The `droppable` fields go, in that order,
    until it `fits` the platform's limit."""
    kept = dict(fields)
    packed = json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
    for name in droppable:
        if fits(packed):
            break
        del kept[name]
        packed = json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
    return packed


@dataclass(frozen=True, slots=True)
class UnpackedTap:
    """What a tapped button's data tells (`packed_tap`)."""

    data: str
    #: The button's label, or its data where the label did not fit.
    label: str
    held_id: str | None
    #: When its message was sent (seconds since the epoch), where the data tells.
    sent_at: int | None
    #: Every field of the data, for what a platform added.
    fields: dict[str, object]

    def metadata(self) -> dict[str, object]:
        """The tap's metadata (`tap_metadata`)."""
        return tap_metadata(self.data, self.held_id, self.sent_at)


def unpacked_tap(raw: str) -> UnpackedTap:
    """A tapped button's data: one `packed_tap` wrote, or any other (a rich menu's, a keyboard
    template's, another program's card) as its own data and label, of no known message."""
    try:
        fields = json.loads(raw)
    except ValueError:
        fields = None
    if not isinstance(fields, dict) or not isinstance(fields.get("d"), str):
        return UnpackedTap(raw, raw, None, None, {})
    data: str = fields["d"]
    held, label, sent_at = fields.get("m"), fields.get("t"), fields.get("s")
    return UnpackedTap(
        data,
        label if isinstance(label, str) and label else data,
        str(held) if held else None,
        sent_at if isinstance(sent_at, int) and not isinstance(sent_at, bool) else None,
        fields,
    )


def tapped_message(message: InboundMessage) -> str | None:
    """The bot message whose button `message` taps, or None for a typed message."""
    callback = message.metadata.get(CALLBACK)
    if not isinstance(callback, dict) or not callback.get("message_id"):
        return None
    return str(callback["message_id"])


def tap_expired(message: InboundMessage, buttons_ttl_s: float, now: float) -> bool:
    """Whether the tap `message` came more than `buttons_ttl_s` after its buttons were sent
    (as far as the platform tells when: `bus.TAPPED_SENT_AT`)."""
    sent_at = message.metadata.get(TAPPED_SENT_AT)
    return isinstance(sent_at, int | float) and now - sent_at > buttons_ttl_s


@dataclass(frozen=True, slots=True)
class ButtonLimits:
    """What one message's buttons may be on a platform."""

    max_rows: int = 8
    max_per_row: int = 8
    #: Characters of a button's label.
    max_label: int = 64
    #: Bytes of a button's data (UTF-8); never more than `bus.BUTTON_DATA_MAX_BYTES`.
    max_data_bytes: int = BUTTON_DATA_MAX_BYTES


def fit_buttons(
    buttons: ButtonRows, limits: ButtonLimits, *, channel: str, warned: set[str]
) -> ButtonRows:
    """`buttons` cut to `limits`: rows and buttons past the limit dropped, labels and data cut
    short. Each kind of cut is logged once per `warned` (the profile's set)."""

    def warn(what: str, **details: object) -> None:
        key = f"{channel}:{what}"
        if key not in warned:
            warned.add(key)
            log.warning("buttons.cut_to_limit", channel=channel, limit=what, **details)

    if len(buttons) > limits.max_rows:
        warn("rows", rows=len(buttons), max_rows=limits.max_rows)
    fitted: ButtonRows = []
    for row in buttons[: limits.max_rows]:
        if len(row) > limits.max_per_row:
            warn("per_row", buttons=len(row), max_per_row=limits.max_per_row)
        kept: list[Button] = []
        for button in row[: limits.max_per_row]:
            text = button.text or (button.data or button.url or "?")
            if len(text) > limits.max_label:
                warn("label", label=text[:40], max_label=limits.max_label)
                text = text[: limits.max_label - 1] + "…"
            data = button.data
            if button.url is None:
                data = data if data else text
                max_bytes = min(limits.max_data_bytes, BUTTON_DATA_MAX_BYTES)
                cut = truncate_utf8(data, max_bytes)
                if cut != data:
                    warn("data", data=data[:40], max_bytes=max_bytes)
                data = cut
            kept.append(Button(text=text, data=data, url=button.url))
        if kept:
            fitted.append(kept)
    return fitted


def numbered_list(buttons: ButtonRows) -> str:
    """The buttons as text to end a reply with: the tappable ones numbered, in order (the
    numbers the intake maps back), the links as "label: url"."""
    choices: list[str] = []
    links: list[str] = []
    for row in buttons:
        for button in row:
            if button.url is not None and button.data is None:
                links.append(f"{button.text}: {button.url}")
            else:
                choices.append(f"{len(choices) + 1} for {button.text}")
    lines = []
    if choices:
        lines.append("Reply " + ", ".join(choices))
    lines.extend(links)
    return "\n".join(lines)


def with_numbered_list(content: str, buttons: ButtonRows) -> str:
    listed = numbered_list(buttons)
    if not listed:
        return content
    return f"{content.rstrip()}\n\n{listed}" if content.strip() else listed
