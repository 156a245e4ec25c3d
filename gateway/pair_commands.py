"""`octos-gateway pair CODE` and `octos-gateway allow list|remove`: the allow-list overlay.

`pair` redeems the one-time code a stranger got from a channel with `pairing: true` and adds
them to their profile's overlay in the data directory; the running daemon notices within a
second (no YAML edit, no SIGHUP). `allow list` shows every approved sender, `allow remove`
withdraws an approval. Like `sessions`, each takes `-c FILE` or `--data-dir DIR`, before or
after the action.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from channels.allow_overlay import AllowOverlay, OverlayEntry
from channels.pairing_codes import PairingCodes, normalise_code
from gateway.cli_args import (
    EXIT_INVALID_CONFIG,
    EXIT_NOT_FOUND,
    EXIT_OK,
    CommandSet,
    add_location_arguments,
    located,
)


def add_pair_commands(commands: CommandSet) -> None:
    # Declared as every command is (see gateway.cli_args): alike in argparse's form, not logic.
    pair = commands.add(
        "pair",
        cmd_pair,
        help="approve a stranger by the code the bot gave them",
        description="Redeem a pairing code (valid an hour, once) and add its sender to the "
        "allow-list overlay in the data directory; the running daemon applies it at once.",
    )
    pair.add_argument("code", help="the code, e.g. K7PQ-4XMZ (dashes and case do not matter)")
    add_location_arguments(pair)

    allow = commands.add_group(
        "allow",
        help="list or remove senders approved by pairing",
        description="The allow-list overlay: senders approved with `pair`, by profile and "
        "channel (the allow lists in the profiles are not changed).",
        located=True,
    )
    listing = allow.add("list", cmd_allow_list, help="every approved sender")
    listing.add_argument("--profile", help="only this profile")
    remove = allow.add("remove", cmd_allow_remove, help="withdraw a sender's approval")
    remove.add_argument("sender", help="the sender id, as `allow list` shows it")
    remove.add_argument("--profile", help="only in this profile")
    remove.add_argument("--channel", help="only on this channel")


def _profile_roots(data_dir: Path, only: str | None = None) -> dict[str, Path]:
    if not data_dir.is_dir():
        return {}
    return {
        path.name: path
        for path in sorted(data_dir.iterdir())
        if path.is_dir() and (only is None or path.name == only)
    }


def _located(args: argparse.Namespace) -> Path | None:
    where = located(args)
    return None if where is None else where[0]


def cmd_pair(args: argparse.Namespace) -> int:
    data_dir = _located(args)
    if data_dir is None:
        return EXIT_INVALID_CONFIG
    code = normalise_code(args.code)
    for profile, root in _profile_roots(data_dir).items():
        pending = PairingCodes(root).redeem(code)
        if pending is None:
            continue
        # Telegram's sender id is "id|username": the id is stable, the username is not.
        sender = pending.sender_id.split("|")[0]
        AllowOverlay(root).add(pending.channel, sender)
        print(
            f"paired: {pending.channel} sender {sender} may now talk to profile {profile} "
            f"(undo with: octos-gateway allow remove {sender})"
        )
        return EXIT_OK
    print(
        f"error: no valid pairing code {args.code!r} in {data_dir}; codes work once and expire "
        "after an hour: ask the sender to write to the bot again for a new one",
        file=sys.stderr,
    )
    return EXIT_NOT_FOUND


def cmd_allow_list(args: argparse.Namespace) -> int:
    entries = _in_each_overlay(args, AllowOverlay.entries)
    if entries is None:
        return EXIT_INVALID_CONFIG
    for profile, entry in entries:
        print(f"{profile}\t{entry.channel}\t{entry.sender_id}\tadded {entry.added_at}")
    if not entries:
        print("no senders approved by pairing", file=sys.stderr)
    return EXIT_OK


def cmd_allow_remove(args: argparse.Namespace) -> int:
    removed = _in_each_overlay(args, lambda overlay: overlay.remove(args.sender, args.channel))
    if removed is None:
        return EXIT_INVALID_CONFIG
    for profile, entry in removed:
        print(f"removed: {profile} {entry.channel} {entry.sender_id}")
    if not removed:
        print(
            f"error: {args.sender!r} is not approved by pairing; see `octos-gateway allow list`",
            file=sys.stderr,
        )
        return EXIT_NOT_FOUND
    return EXIT_OK


def _in_each_overlay(
    args: argparse.Namespace, entries_of: Callable[[AllowOverlay], list[OverlayEntry]]
) -> list[tuple[str, OverlayEntry]] | None:
    """`entries_of` the allow-list overlay of each profile `--profile` selects (all by
    default), each entry with its profile; None once the configuration's problems are printed."""
    data_dir = _located(args)
    if data_dir is None:
        return None
    roots = _profile_roots(data_dir, args.profile)
    return [
        (profile, entry)
        for profile, root in roots.items()
        for entry in entries_of(AllowOverlay(root))
    ]
