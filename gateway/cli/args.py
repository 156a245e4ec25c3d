"""Arguments several commands share, accepted before or after a command's action, what they
locate, how a configuration's problems are printed, and the exit statuses the commands share.

Every command declares its own parser (`CommandSet.add` with its help, then its arguments)
beside the command, and says what it does in its handler's docstring; what the commands share
in meaning lives here.

That includes the `.env` beside gateway.yaml: the secrets `init` names, read by every command
that loads the configuration. Values already in the process environment win, as with Docker
Compose, so a deployment can override any of them. The file is read with python-dotenv
(quoting, `export`, comments).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

from config import ConfigError, LoadedConfig, default_config, load_gateway
from config.interpolate import ENV_FILE
from config.store import StoreConfig

__all__ = ["ENV_FILE", "environment_for"]


def environment_for(config_path: Path) -> dict[str, str]:
    """os.environ over the `.env` beside `config_path` (when there is one)."""
    env_file = config_path.absolute().parent / ENV_FILE
    from_file = dotenv_values(env_file) if env_file.is_file() else {}
    merged = {key: value for key, value in from_file.items() if value is not None}
    merged.update(os.environ)
    return merged


EXIT_OK = 0
EXIT_NOT_FOUND = 1
#: The command ran and reported problems (`store migrate`, `dead-letters show` of a missing id).
EXIT_PROBLEMS = 1
EXIT_INVALID_CONFIG = 2
#: A database, server or port the command needs cannot be reached or is taken (EX_UNAVAILABLE).
EXIT_UNAVAILABLE = 69

#: What runs a command: its parsed arguments in, its exit status out.
Handler = Callable[[argparse.Namespace], int]


class CommandSet:
    """The commands of `octos-gateway`, or the actions of one command (`sessions list`): each
    a parser of its own, and for what can be run the handler `main` calls."""

    def __init__(
        self, parser: argparse.ArgumentParser, *, dest: str, metavar: str, located: bool = False
    ) -> None:
        self._parsers = parser.add_subparsers(dest=dest, required=True, metavar=metavar)
        self._located = located

    def add(
        self,
        name: str,
        handler: Handler,
        *,
        help: str,
        description: str | None = None,
    ) -> argparse.ArgumentParser:
        """A command that `handler` runs. Its `--help` says `help` in the list of commands and,
        as what the command does, `description` or else the handler's docstring."""
        parser = self._parsers.add_parser(
            name, help=help, description=description or inspect.getdoc(handler)
        )
        parser.set_defaults(func=handler)
        if self._located:
            add_location_arguments(parser, nested=True)
        return parser

    def add_group(
        self,
        name: str,
        *,
        help: str,
        description: str,
        located: bool = False,
    ) -> CommandSet:
        """A command whose actions are run (`sessions list`), one of which must be given.

        `located`: its actions read the data directory, and `-c FILE` / `--data-dir DIR` are
        accepted before the action and after it (`sessions -c F list`, `sessions list -c F`).
        """
        parser = self._parsers.add_parser(name, help=help, description=description)
        if located:
            add_location_arguments(parser)
        return CommandSet(parser, dest="action", metavar="ACTION", located=located)


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """`-c FILE`, required: the gateway.yaml a command reads."""
    parser.add_argument("-c", "--config", type=Path, required=True, help="gateway.yaml")


def add_location_arguments(parser: argparse.ArgumentParser, *, nested: bool = False) -> None:
    """`-c FILE` and `--data-dir DIR`, which say where the data directory is.

    Given on an action too (`sessions list -c FILE`): there they default to SUPPRESS, so an
    action without them keeps what was given before it (`sessions -c FILE list`).
    """
    default: Any = argparse.SUPPRESS if nested else None
    parser.add_argument(
        "-c", "--config", type=Path, default=default, help="gateway.yaml (for its data_dir)"
    )
    parser.add_argument(
        "--data-dir", type=Path, default=default, help="the data directory (overrides -c)"
    )


def load_config(config_path: Path) -> LoadedConfig | None:
    """gateway.yaml at `config_path` and its profiles, with the `.env` beside it; None once the
    configuration's problems are printed."""
    try:
        return load_gateway(config_path, environment_for(config_path))
    except ConfigError as error:
        print_problems(error)
        return None


def located(args: argparse.Namespace) -> tuple[Path, StoreConfig] | None:
    """The data directory (`--data-dir` wins over gateway.yaml's) and the session store of
    `add_location_arguments`; None once the configuration's problems are printed."""
    loaded = load_config(args.config) if args.config else default_config()
    if loaded is None:
        return None
    data_dir = Path(args.data_dir) if args.data_dir is not None else loaded.gateway.data_dir
    return Path(data_dir), loaded.gateway.store


def print_problems(error: ConfigError) -> None:
    for problem in error.problems:
        print(f"error: {problem}", file=sys.stderr)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
