"""The CLI's cluster parts: the start-up check of NATS (`run` exits 69 when it is away), the
`--role` rule, and `octos-gateway dead-letters list|show|retry|drop|purge -c gateway.yaml` with
`bus: {backend: nats}` (the command itself: `gateway.cli.dead_letters`).

A cluster's dead letters are inbound messages that kept failing (`max_deliver`) and replies an
ingress gave up on, in one stream: `list` shows each one's id (its sequence in the dead-letter
stream), profile, chat and reason (a reply's with when and the platform's error); `show ID` the
whole message; `retry ID` publishes it to its partition again (an inbound message with a fresh
delivery count; a reply to its chat's outbound partition, once, with a fresh deadline) and
removes the dead copy; `drop ID` removes one, `purge` them all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from config import LoadedConfig
from gateway.cli.args import (
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_UNAVAILABLE,
    plural,
)

if TYPE_CHECKING:
    from gateway.cluster.dead_letters import DeadLetter, DeadLetters

ROLES = ("all", "ingress", "worker")


def role_problem(loaded: LoadedConfig, role: str) -> str | None:
    """Why `role` cannot run with this config (a split role needs the NATS bus)."""
    if role != "all" and loaded.gateway.bus.backend != "nats":
        return (
            f"--role {role} needs a cluster: set bus: {{backend: nats}} (and store: "
            "{backend: postgres}) in gateway.yaml, or run without --role (all in one process)"
        )
    return None


def bus_client_missing(loaded: LoadedConfig) -> str | None:
    """Why this installation cannot talk to the configured NATS at all (nats-py missing)."""
    if loaded.gateway.bus.backend != "nats":
        return None
    try:
        import gateway.cluster.connection  # noqa: F401  (imports nats-py)
    except ModuleNotFoundError as error:
        return (
            f"bus backend nats needs nats-py (no module {error.name!r}); install it with "
            "pip install 'octos-gateway[nats]'"
        )
    return None


def bus_unreachable(loaded: LoadedConfig) -> str | None:
    """Why the configured NATS cannot be used; None when it can (or the bus is in memory)."""
    bus = loaded.gateway.bus
    if bus.backend != "nats":
        return None
    if (missing := bus_client_missing(loaded)) is not None:
        return missing
    from gateway.cluster.connection import BusUnavailable, check_bus

    try:
        asyncio.run(check_bus(bus.nats))
    except BusUnavailable as error:
        return str(error)
    return None


def cluster_dead_letters(loaded: LoadedConfig, args: argparse.Namespace) -> int:
    """`dead-letters ACTION` with `bus: {backend: nats}` (see `gateway.cli.dead_letters`)."""
    if (unreachable := bus_unreachable(loaded)) is not None:
        print(f"error: {unreachable}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return asyncio.run(_dead_letters(loaded, args))


async def _dead_letters(loaded: LoadedConfig, args: argparse.Namespace) -> int:
    from gateway.cluster.connection import REQUEST_TIMEOUT_S, connected
    from gateway.cluster.dead_letters import DeadLetterMissing, DeadLetters, DeadLetterUnreadable
    from gateway.cluster.streams import names_of

    config = loaded.gateway.bus.nats
    async with connected(config, name="octos-gateway dead-letters") as client:
        box = DeadLetters(client.jetstream(timeout=REQUEST_TIMEOUT_S), names_of(config))
        try:
            return await _act(box, args)
        except (DeadLetterMissing, DeadLetterUnreadable, _NotASequence) as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_PROBLEMS


class _NotASequence(LookupError):
    def __init__(self, given: str) -> None:
        super().__init__(
            f"no dead letter {given!r}: in a cluster the ids are numbers; `dead-letters list` "
            "shows them"
        )


def _sequence(given: str) -> int:
    try:
        return int(given)
    except ValueError:
        raise _NotASequence(given) from None


async def _act(box: DeadLetters, args: argparse.Namespace) -> int:
    if args.action == "list":
        letters = await box.list()
        for letter in letters:
            print(_line(letter))
        print(f"{plural(len(letters), 'dead letter')}", file=sys.stderr)
    elif args.action == "show":
        print(
            json.dumps(_details(await box.show(_sequence(args.id))), indent=2, ensure_ascii=False)
        )
    elif args.action == "retry":
        letter = await box.show(_sequence(args.id))
        seq = await box.retry(letter.seq)
        stream = "outbound" if letter.is_reply else "inbound"
        print(f"dead letter {args.id} published again ({stream} sequence {seq})")
    elif args.action == "drop":
        await box.drop(_sequence(args.id))
        print(f"dropped dead letter {args.id}")
    else:
        print(f"purged {plural(await box.purge(), 'dead letter')}")
    return EXIT_OK


def _message(letter: DeadLetter) -> dict[str, Any]:
    try:
        parsed: dict[str, Any] = json.loads(letter.body)
    except ValueError:
        return {"unreadable": letter.body.decode("utf-8", "replace")[:500]}
    return parsed


def _line(letter: DeadLetter) -> str:
    from gateway.cluster.codec import PROFILE

    message = _message(letter)
    profile = letter.headers.get(PROFILE, "?")
    where = f"{profile}:{message.get('channel', '?')}:{message.get('chat_id', '?')}"
    if letter.is_reply:
        # As one process lists its replies given up on: when, why, and the platform's error.
        when = letter.buried_at.isoformat(timespec="milliseconds") if letter.buried_at else "?"
        error = " ".join(letter.error.split())[:200]
        return f"{letter.seq}\t{where}\treply given up {when}\t{letter.reason}\t{error}"
    return f"{letter.seq}\t{where}\tdelivered {letter.deliveries}x\t{letter.reason}"


def _details(letter: DeadLetter) -> dict[str, Any]:
    details: dict[str, Any] = {
        "id": letter.seq,
        "kind": "reply" if letter.is_reply else "inbound",
        "reason": letter.reason,
        "subject": letter.subject,
        "deliveries": letter.deliveries,
        "buried_at": letter.buried_at.isoformat() if letter.buried_at else None,
        "headers": letter.original_headers,
    }
    if letter.is_reply:
        # Named as one process's `show` names it.
        details.update(error=letter.error, reply=_message(letter))
    else:
        details["message"] = _message(letter)
    return details
