"""`octos-gateway send` and `octos-gateway scheduled list|cancel`: the owner's messages.

Both talk to the running daemon's HTTP server (`http.host`/`http.port` of gateway.yaml, with
its `http.token` as the bearer token), which keeps each message in the profile's journal before
answering (`gateway.turn.outbox`): a message the daemon accepted is sent once, also across a
restart. Blocking: each command makes a request or two and exits.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any

from config import LoadedConfig
from gateway.cli.args import (
    EXIT_INVALID_CONFIG,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_UNAVAILABLE,
    CommandSet,
    add_config_argument,
    load_config,
)

#: Longest wait for the daemon's answer.
TIMEOUT_S = 30.0
#: Addresses that listen everywhere: the daemon is reached on loopback.
_ANY_ADDRESS = {"0.0.0.0", "::", ""}


def add_message_commands(commands: CommandSet) -> None:
    send = commands.add(
        "send", cmd_send, help="send a message into a chat through the running daemon"
    )
    add_config_argument(send)
    send.add_argument("--profile", required=True, help="the profile whose bot sends it")
    send.add_argument("--channel", required=True, help="the channel's name (telegram, slack...)")
    send.add_argument("--chat", required=True, help="the chat id on that platform")
    send.add_argument(
        "--at",
        metavar="TIME",
        help="when to send it, ISO 8601 (2026-12-05T09:00:00+01:00; without a zone: local "
        "time); default now",
    )
    send.add_argument("--key", metavar="KEY", help="idempotency key: one message per key")
    send.add_argument(
        "--session",
        choices=("append", "none"),
        default="append",
        help="append the text to the chat's session as the assistant's (default), or not",
    )
    send.add_argument("text", help="what to send")

    scheduled = commands.add_group(
        "scheduled",
        help="list or cancel the messages waiting to be sent",
        description="The messages `send --at` (or POST /v1/messages with send_at) scheduled "
        "that the running daemon has not sent yet.",
    )
    listing = scheduled.add(
        "list", cmd_scheduled, help="one line per scheduled message: id, profile, chat, when"
    )
    add_config_argument(listing)
    cancel = scheduled.add("cancel", cmd_scheduled, help="cancel one that is not sent yet")
    add_config_argument(cancel)
    cancel.add_argument("id", help="the id `send` printed (or `scheduled list` shows)")


def cmd_send(args: argparse.Namespace) -> int:
    """Ask the running daemon to send TEXT into a chat of a profile, now or at --at. It answers
    once the message is in the profile's journal: sent once, also across restarts; --key makes a
    retry of this command send nothing twice (24 h)."""
    loaded = load_config(args.config)
    if loaded is None:
        return EXIT_INVALID_CONFIG
    body: dict[str, Any] = {
        "profile": args.profile,
        "channel": args.channel,
        "chat_id": args.chat,
        "text": args.text,
        "session": args.session,
    }
    if args.at is not None:
        try:
            at = datetime.fromisoformat(args.at)
        except ValueError:
            print(f"error: --at {args.at!r} is not an ISO 8601 time", file=sys.stderr)
            return EXIT_INVALID_CONFIG
        body["send_at"] = (at if at.utcoffset() is not None else at.astimezone()).isoformat()
    if args.key is not None:
        body["idempotency_key"] = args.key
    answered = _request(loaded, "POST", "/v1/messages", body)
    if isinstance(answered, int):
        return answered
    print(f"{answered['id']} {answered['status']}")
    return EXIT_OK


def cmd_scheduled(args: argparse.Namespace) -> int:
    loaded = load_config(args.config)
    if loaded is None:
        return EXIT_INVALID_CONFIG
    if args.action == "cancel":
        answered = _request(loaded, "DELETE", f"/v1/messages/{args.id}")
        if isinstance(answered, int):
            return answered
        print(f"{answered['id']} {answered['status']}")
        return EXIT_OK
    answered = _request(loaded, "GET", "/v1/messages?status=scheduled")
    if isinstance(answered, int):
        return answered
    for message in answered["messages"]:
        due = datetime.fromtimestamp(float(message["send_at"])).astimezone().isoformat()
        where = f"{message['profile']}:{message['channel']}:{message['chat_id']}"
        print(f"{message['id']}  {where}  {due}")
    return EXIT_OK


def _request(
    loaded: LoadedConfig, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any] | int:
    """The daemon's JSON answer, or the exit status once its refusal is printed."""
    http = loaded.gateway.http
    host = "127.0.0.1" if http.host in _ANY_ADDRESS else http.host
    host = f"[{host}]" if ":" in host else host
    headers = {"Content-Type": "application/json"}
    if http.token is not None:
        headers["Authorization"] = f"Bearer {http.token.get_secret_value()}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{host}:{http.port}{path}", data=data, headers=headers, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as refused:
        try:
            said = json.loads(refused.read())
        except ValueError:
            said = {"error": refused.reason}
        print(f"error: {refused.code} {said.get('error')}", file=sys.stderr)
        if said.get("suggestion"):
            print(f"  {said['suggestion']}", file=sys.stderr)
        return EXIT_NOT_FOUND if refused.code == 404 else EXIT_PROBLEMS
    except (urllib.error.URLError, OSError) as error:
        print(
            f"error: the daemon does not answer on {host}:{http.port} ({error}); "
            "is `octos-gateway run` running with this gateway.yaml?",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
