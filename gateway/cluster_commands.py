"""The CLI's cluster parts: the start-up check of NATS (`run` exits 69 when it is away), the
`--role` rule, and `octos-gateway dead-letters list|show|retry|purge -c gateway.yaml`.

Dead letters are inbound messages that kept failing (`max_deliver`): `list` shows each one's id
(its sequence in the dead-letter stream), profile, chat and reason; `show ID` the whole message;
`retry ID` publishes it to its partition again (a fresh delivery count) and removes the dead
copy; `purge` removes them all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from config import ConfigError, LoadedConfig, load_gateway
from gateway.cli_args import (
    EXIT_INVALID_CONFIG,
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_UNAVAILABLE,
    CommandSet,
    add_config_argument,
    plural,
)
from gateway.env_file import environment_for

if TYPE_CHECKING:
    from cluster.dead_letters import DeadLetter, DeadLetters

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
        import cluster.connection  # noqa: F401  (imports nats-py)
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
    from cluster.connection import BusUnavailable, check_bus

    try:
        asyncio.run(check_bus(bus.nats))
    except BusUnavailable as error:
        return str(error)
    return None


def add_dead_letter_commands(commands: CommandSet) -> None:
    # Declared as every command is (see gateway.cli_args): alike in argparse's form, not logic.
    dead = commands.add_group(
        "dead-letters",
        help="inspect, retry or purge the cluster's dead letters",
        description="Inbound messages that kept failing are kept in the dead-letter stream "
        "with the reason (bus backend nats).",
    )
    for name, text in (
        ("list", "one line per dead letter: id, profile:channel:chat, deliveries, reason"),
        ("show", "the whole dead letter: headers, reason and message"),
        ("retry", "publish it to its partition again and remove the dead copy"),
        ("purge", "remove every dead letter"),
    ):
        action = dead.add(name, cmd_dead_letters, help=text, description=text)
        add_config_argument(action)
        if name in ("show", "retry"):
            action.add_argument("id", type=int, help="the id `dead-letters list` shows")


def cmd_dead_letters(args: argparse.Namespace) -> int:
    try:
        loaded = load_gateway(args.config, environment_for(args.config))
    except ConfigError as error:
        print(error, file=sys.stderr)
        return EXIT_INVALID_CONFIG
    if loaded.gateway.bus.backend != "nats":
        print(
            "error: dead letters exist only with bus: {backend: nats} (this gateway.yaml "
            "uses the in-memory bus)",
            file=sys.stderr,
        )
        return EXIT_INVALID_CONFIG
    if (unreachable := bus_unreachable(loaded)) is not None:
        print(f"error: {unreachable}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return asyncio.run(_dead_letters(loaded, args))


async def _dead_letters(loaded: LoadedConfig, args: argparse.Namespace) -> int:
    from cluster.connection import REQUEST_TIMEOUT_S, connected
    from cluster.dead_letters import DeadLetterMissing, DeadLetters
    from cluster.streams import names_of

    config = loaded.gateway.bus.nats
    async with connected(config, name="octos-gateway dead-letters") as client:
        box = DeadLetters(client.jetstream(timeout=REQUEST_TIMEOUT_S), names_of(config))
        try:
            return await _act(box, args)
        except DeadLetterMissing as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_PROBLEMS


async def _act(box: DeadLetters, args: argparse.Namespace) -> int:
    if args.action == "list":
        letters = await box.list()
        for letter in letters:
            print(_line(letter))
        print(f"{plural(len(letters), 'dead letter')}", file=sys.stderr)
    elif args.action == "show":
        print(json.dumps(_details(await box.show(args.id)), indent=2, ensure_ascii=False))
    elif args.action == "retry":
        seq = await box.retry(args.id)
        print(f"dead letter {args.id} published again (inbound sequence {seq})")
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
    from cluster.codec import PROFILE

    message = _message(letter)
    profile = letter.headers.get(PROFILE, "?")
    where = f"{profile}:{message.get('channel', '?')}:{message.get('chat_id', '?')}"
    return f"{letter.seq}\t{where}\tdelivered {letter.deliveries}x\t{letter.reason}"


def _details(letter: DeadLetter) -> dict[str, Any]:
    return {
        "id": letter.seq,
        "reason": letter.reason,
        "subject": letter.subject,
        "deliveries": letter.deliveries,
        "buried_at": letter.buried_at.isoformat() if letter.buried_at else None,
        "headers": letter.original_headers,
        "message": _message(letter),
    }
