"""`octos-gateway pair CODE` and `octos-gateway allow list|remove`: the allow-list overlay.

`pair` redeems the one-time code a stranger got from a channel with `pairing: true` and adds
them to their profile's overlay, in the data directory or, with `store: {backend: postgres}`,
in the database; every running daemon notices within a second (no YAML edit, no SIGHUP).
`allow list` shows every approved sender, `allow remove` withdraws an approval. Like
`sessions`, each takes `-c FILE` or `--data-dir DIR`, before or after the action.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from channels.access.allow import OverlayEntry
from channels.access.pairing import PairingStore, normalise_code
from gateway.cli.args import (
    EXIT_INVALID_CONFIG,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    CommandSet,
    Handler,
    add_location_arguments,
    located,
)
from gateway.pairing import every_pairing_store
from sessions.errors import SessionError


def add_pair_commands(commands: CommandSet) -> None:
    pair = commands.add("pair", cmd_pair, help="approve a stranger by the code the bot gave them")
    pair.add_argument("code", help="the code, e.g. K7PQ-4XMZ (dashes and case do not matter)")
    add_location_arguments(pair)

    allow = commands.add_group(
        "allow",
        help="list or remove senders approved by pairing",
        description="The allow-list overlay: senders approved with `pair`, by profile and "
        "channel (the allow lists in the profiles are not changed).",
        located=True,
    )
    listing = allow.add("list", _in_selected_profiles(_allow_list), help="every approved sender")
    listing.add_argument("--profile", help="only this profile")
    remove = allow.add(
        "remove", _in_selected_profiles(_allow_remove), help="withdraw a sender's approval"
    )
    remove.add_argument("sender", help="the sender id, as `allow list` shows it")
    remove.add_argument("--profile", help="only in this profile")
    remove.add_argument("--channel", help="only on this channel")


def cmd_pair(args: argparse.Namespace) -> int:
    """Redeem a pairing code (valid an hour, once) and add its sender to the allow-list overlay
    (in the data directory, or the PostgreSQL database of store.dsn); the running daemon applies
    it at once."""
    return _run(args, _pair)


async def _pair(args: argparse.Namespace, stores: dict[str, PairingStore], where: str) -> int:
    code = normalise_code(args.code)
    for profile, store in stores.items():
        pending = await store.redeem(code)
        if pending is None:
            continue
        # Telegram's sender id is "id|username": the id is stable, the username is not.
        sender = pending.sender_id.split("|")[0]
        await store.add(pending.channel, sender)
        undo = shlex.join(["octos-gateway", "allow", "remove", sender, *_location_flags(args)])
        print(
            f"paired: {pending.channel} sender {sender} may now talk to profile {profile} "
            f"(undo with: {undo})"
        )
        return EXIT_OK
    print(
        f"error: no valid pairing code {args.code!r} in {where}; codes work once and expire "
        "after an hour: ask the sender to write to the bot again for a new one",
        file=sys.stderr,
    )
    return EXIT_NOT_FOUND


def _location_flags(args: argparse.Namespace) -> list[str]:
    """The `-c` and `--data-dir` this command was given, made absolute: what a command it
    prints needs to find the same data, from whatever directory it is run."""
    flags: list[str] = []
    if args.config is not None:
        flags += ["-c", str(Path(args.config).absolute())]
    if args.data_dir is not None:
        flags += ["--data-dir", str(Path(args.data_dir).absolute())]
    return flags


@dataclass(frozen=True, slots=True)
class _EntryAction:
    """An `allow` action: one line for each overlay entry `ask` gets from each profile's store,
    in profile order; with none, `if_none` on stderr and the exit code `exit_if_none`."""

    ask: Callable[[argparse.Namespace, PairingStore], Awaitable[list[OverlayEntry]]]
    line: Callable[[str, OverlayEntry], str]
    if_none: Callable[[argparse.Namespace], str]
    exit_if_none: int

    async def __call__(
        self, args: argparse.Namespace, stores: dict[str, PairingStore], _where: str
    ) -> int:
        printed = 0
        for profile, store in stores.items():
            for entry in await self.ask(args, store):
                print(self.line(profile, entry))
                printed += 1
        if printed:
            return EXIT_OK
        print(self.if_none(args), file=sys.stderr)
        return self.exit_if_none


_allow_list = _EntryAction(
    ask=lambda _args, store: store.entries(),
    line=lambda profile, entry: (
        f"{profile}\t{entry.channel}\t{entry.sender_id}\tadded {entry.added_at}"
    ),
    if_none=lambda _args: "no senders approved by pairing",
    exit_if_none=EXIT_OK,
)

_allow_remove = _EntryAction(
    ask=lambda args, store: store.remove(args.sender, args.channel),
    line=lambda profile, entry: f"removed: {profile} {entry.channel} {entry.sender_id}",
    if_none=lambda args: (
        f"error: {args.sender!r} is not approved by pairing; see `octos-gateway allow list`"
    ),
    exit_if_none=EXIT_NOT_FOUND,
)


Action = Callable[[argparse.Namespace, dict[str, PairingStore], str], Awaitable[int]]


def _in_selected_profiles(action: Action) -> Handler:
    """The command running `action` over the profile `--profile` names, or every profile."""
    return lambda args: _run(args, action, only=args.profile)


def _run(args: argparse.Namespace, action: Action, *, only: str | None = None) -> int:
    """`action` over the pairing store of each profile `only` selects (all by default), where
    the configuration keeps them (the data directory, or PostgreSQL)."""
    location = located(args)
    if location is None:
        return EXIT_INVALID_CONFIG
    data_dir, store = location
    where = store.redacted_dsn if store.backend == "postgres" else str(data_dir)

    async def run() -> int:
        async with every_pairing_store(store, data_dir, only) as stores:
            return await action(args, stores, where)

    try:
        return asyncio.run(run())
    except SessionError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
