"""`octos-gateway dead-letters list|show|retry|drop|purge`: what could not be delivered.

In one process (the in-memory bus) the dead letters are the replies each profile gave up on,
kept in its data directory (`gateway.daemon.reply_dead_letters`): `retry ID` asks the daemon to send
one again (the running one within a second, a stopped one at its next start), `drop ID` forgets
one, `purge` all. With `bus: {backend: nats}` they are in the cluster's dead-letter stream: the
replies its ingress processes gave up on, and the inbound messages that kept failing
(`gateway.cli.cluster`). Like `sessions`, each action takes `-c FILE` or `--data-dir DIR`,
before or after it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gateway.cli.args import (
    EXIT_INVALID_CONFIG,
    EXIT_NOT_FOUND,
    EXIT_OK,
    CommandSet,
    load_config,
    located,
    plural,
)
from gateway.cli.cluster import cluster_dead_letters
from gateway.daemon.reply_dead_letters import DeadLetterStore, ReplyDeadLetter

_ACTIONS = (
    ("list", "one line per dead letter: id, profile:channel:chat, when, reason"),
    ("show", "the whole dead letter as JSON: its reason, error and message"),
    ("retry", "send it again (in a cluster: publish it to its partition again)"),
    ("drop", "forget one dead letter"),
    ("purge", "forget every dead letter"),
)


def add_dead_letter_commands(commands: CommandSet) -> None:
    dead = commands.add_group(
        "dead-letters",
        help="list, retry or drop what could not be delivered",
        description="Replies given up on (the platform failed past delivery_deadline_s, or "
        "refused them for good) are kept per profile in the data directory with the reason; "
        "with bus backend nats, they and the inbound messages that kept failing are kept in "
        "the dead-letter stream.",
        located=True,
    )
    for name, text in _ACTIONS:
        action = dead.add(name, cmd_dead_letters, help=text, description=text)
        if name in ("show", "retry", "drop"):
            action.add_argument(
                "id", help="the id `dead-letters list` shows (in one process: or its start)"
            )


def cmd_dead_letters(args: argparse.Namespace) -> int:
    if args.config is not None:
        loaded = load_config(args.config)
        if loaded is None:
            return EXIT_INVALID_CONFIG
        if loaded.gateway.bus.backend == "nats":
            return cluster_dead_letters(loaded, args)
    location = located(args)
    if location is None:
        return EXIT_INVALID_CONFIG
    data_dir, _store = location
    stores = _stores(data_dir)
    if args.action == "list":
        return _list(stores)
    if args.action == "purge":
        return _purge(stores)
    found = _find(stores, args.id)
    if found is None:
        return EXIT_NOT_FOUND
    store, letter = found
    if args.action == "show":
        print(json.dumps(letter.to_dict(), indent=2, ensure_ascii=False))
    elif args.action == "retry":
        if not store.ask_retry(letter.id):
            return _missing(args.id)
        print(
            f"dead letter {letter.id} will be sent again: by the running daemon within a "
            "second, or at its next start"
        )
    elif store.drop(letter.id):
        print(f"dropped dead letter {letter.id}")
    else:
        return _missing(args.id)
    return EXIT_OK


def _stores(data_dir: Path) -> list[DeadLetterStore]:
    if not data_dir.is_dir():
        return []
    return [DeadLetterStore(path) for path in sorted(data_dir.iterdir()) if path.is_dir()]


def _list(stores: list[DeadLetterStore]) -> int:
    count = 0
    for store in stores:
        for letter in store.letters():
            print(_line(letter))
            count += 1
    print(plural(count, "dead letter"), file=sys.stderr)
    return EXIT_OK


def _line(letter: ReplyDeadLetter) -> str:
    reply = letter.reply
    reason = f"{letter.reason} (retry asked)" if letter.retrying else letter.reason
    error = " ".join(letter.error.split())[:200]
    where = f"{letter.profile}:{reply.channel}:{reply.chat_id}"
    return f"{letter.id}\t{where}\t{letter.at}\t{reason}\t{error}"


def _purge(stores: list[DeadLetterStore]) -> int:
    dropped = sum(store.drop(letter.id) for store in stores for letter in store.letters())
    print(f"purged {plural(dropped, 'dead letter')}")
    return EXIT_OK


def _find(
    stores: list[DeadLetterStore], wanted: str
) -> tuple[DeadLetterStore, ReplyDeadLetter] | None:
    """The dead letter `wanted` names: its id, or the start of one id alone."""
    if not wanted:
        _missing(wanted)
        return None
    matches = [
        (store, letter)
        for store in stores
        for letter in store.letters()
        if letter.id.startswith(wanted)
    ]
    exact = [(store, letter) for store, letter in matches if letter.id == wanted]
    if exact:
        return exact[0]
    if len(matches) == 1:
        return matches[0]
    if matches:
        ids = ", ".join(letter.id for _store, letter in matches)
        print(
            f"error: {wanted!r} names {len(matches)} dead letters ({ids}); give more of the id",
            file=sys.stderr,
        )
        return None
    _missing(wanted)
    return None


def _missing(wanted: str) -> int:
    print(
        f"error: no dead letter {wanted!r}; `octos-gateway dead-letters list` shows the ids "
        "there are",
        file=sys.stderr,
    )
    return EXIT_NOT_FOUND
