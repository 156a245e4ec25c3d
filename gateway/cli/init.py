"""`octos-gateway init [DIR]`: ask a few questions, write a configuration that passes `check`.

Interactive by default; `--yes` with `--channel NAME` (repeatable) and `--agent echo|openai` asks
nothing. An existing file is never overwritten without a yes to the question, or `--force`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from config.channels import DEFAULT_API_PORT
from config.gateway import DEFAULT_HEALTH_PORT
from gateway.cli.args import (
    ENV_FILE,
    EXIT_INVALID_CONFIG,
    EXIT_OK,
    CommandSet,
    load_config,
)
from gateway.cli.scaffold import (
    CHANNEL_CHOICES,
    DEFAULT_BASE_URL,
    DEFAULT_CHANNELS,
    DEFAULT_MODEL,
    DEFAULT_PROFILE,
    AgentChoice,
    ScaffoldChoices,
    env_file,
    gateway_yaml,
    profile_yaml,
)

EXIT_NOT_WRITTEN = 1

Ask = Callable[[str], str]


def add_init_command(commands: CommandSet) -> None:
    init = commands.add("init", cmd_init, help="write gateway.yaml, a profile and a .env template")
    init.add_argument("dir", nargs="?", type=Path, default=Path("."), help="where (default .)")
    init.add_argument("--yes", "-y", action="store_true", help="ask nothing, use the options")
    init.add_argument(
        "--channel",
        action="append",
        choices=CHANNEL_CHOICES,
        help=f"a channel of the bot; repeatable (default: {', '.join(DEFAULT_CHANNELS)})",
    )
    init.add_argument("--agent", choices=("echo", "openai"), default=None, help="default echo")
    init.add_argument("--base-url", help=f"OpenAI-compatible API (default {DEFAULT_BASE_URL})")
    init.add_argument("--model", help=f"model name (default {DEFAULT_MODEL})")
    init.add_argument("--profile", default=DEFAULT_PROFILE, help="profile id (default main)")
    init.add_argument("--force", action="store_true", help="overwrite existing files")


def cmd_init(args: argparse.Namespace) -> int:
    """Ask which channels and which agent, then write DIR/gateway.yaml,
    DIR/profiles/<profile>.yaml and DIR/.env (naming each secret), and print the run command.
    Never overwrites a file without asking (--force)."""
    ask: Ask | None = None if args.yes else _ask_stdin
    choices = _choose(args, ask)
    directory: Path = args.dir
    files = {
        directory / "gateway.yaml": gateway_yaml(),
        directory / "profiles" / f"{choices.profile}.yaml": profile_yaml(choices),
        directory / ENV_FILE: env_file(choices),
    }
    existing = [path for path in files if path.exists()]
    if existing and not args.force:
        if ask is None:
            # --yes cannot ask, so what was asked for was not done: a script must notice.
            for path in existing:
                print(f"{path} exists; kept it (pass --force to overwrite it)", file=sys.stderr)
            print("nothing written", file=sys.stderr)
            return EXIT_NOT_WRITTEN
        declined = [path for path in existing if not _confirm(ask, path)]
        if declined:
            # The user's own answer: nothing went wrong, so not a failure either.
            for path in declined:
                print(f"kept {path}")
            print("nothing written")
            return EXIT_OK
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.name == ENV_FILE:
            _write_private(path, text)
        else:
            path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return _report(directory / "gateway.yaml", choices)


def _write_private(path: Path, text: str) -> None:
    """Write `text` readable by this user only: `.env` holds the secrets."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        # An existing file keeps its mode through O_TRUNC: narrow it before the secrets go in.
        os.fchmod(file.fileno(), 0o600)
        file.write(text)


def _choose(args: argparse.Namespace, ask: Ask | None) -> ScaffoldChoices:
    channels = tuple(dict.fromkeys(args.channel or ()))
    agent: AgentChoice | None = args.agent
    if ask is not None and not channels:
        channels = _ask_channels(ask)
    if ask is not None and agent is None:
        agent = _ask_choice(ask, "Agent: echo, or openai (any OpenAI-compatible API)", "echo")
    agent = agent or "echo"
    base_url, model = args.base_url or DEFAULT_BASE_URL, args.model or DEFAULT_MODEL
    if agent == "openai" and ask is not None:
        base_url = args.base_url or ask(f"API base URL [{DEFAULT_BASE_URL}]: ") or base_url
        model = args.model or ask(f"Model [{DEFAULT_MODEL}]: ") or model
    return ScaffoldChoices(
        channels=channels or DEFAULT_CHANNELS,
        agent=agent,
        base_url=base_url,
        model=model,
        profile=args.profile,
    )


def _ask_channels(ask: Ask) -> tuple[str, ...]:
    known = ", ".join(CHANNEL_CHOICES)
    while True:
        answer = ask(f"Channels, separated by commas ({known}) [api]: ")
        names = tuple(dict.fromkeys(n.strip().lower() for n in answer.split(",") if n.strip()))
        unknown = [name for name in names if name not in CHANNEL_CHOICES]
        if not unknown:
            return names or DEFAULT_CHANNELS
        print(f"unknown channel {', '.join(unknown)}: choose from {known}")


def _ask_choice(ask: Ask, question: str, default: AgentChoice) -> AgentChoice:
    while True:
        answer = ask(f"{question} [{default}]: ").strip().lower() or default
        if answer == "echo":
            return "echo"
        if answer == "openai":
            return "openai"
        print("answer echo or openai")


def _confirm(ask: Ask, path: Path) -> bool:
    return ask(f"{path} exists: overwrite it? [y/N]: ").strip().lower() in ("y", "yes")


def _ask_stdin(question: str) -> str:
    try:
        return input(question)
    except EOFError:
        print()
        return ""


def _report(config: Path, choices: ScaffoldChoices) -> int:
    loaded = load_config(config)
    if loaded is None:  # a bug in the scaffold: say so rather than hide it
        return EXIT_INVALID_CONFIG
    for warning in loaded.warnings:
        print(f"warning: {warning}")
    env = config.parent / ENV_FILE
    needs_secrets = any(name in choices.channels for name in ("telegram", "discord", "slack"))
    print()
    if needs_secrets or choices.agent == "openai":
        print(f"Next: put the real secrets in {env}, then check them:")
        print(f"  octos-gateway doctor -c {config}")
    print("Run it:")
    print(f"  octos-gateway run -c {config}")
    if "api" in choices.channels:
        print(
            f"then open http://127.0.0.1:{DEFAULT_API_PORT} to chat; the status page is "
            f"http://127.0.0.1:{DEFAULT_HEALTH_PORT}"
        )
    return EXIT_OK
