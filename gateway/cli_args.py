"""Arguments several commands share, accepted before or after a command's action, what they
locate, and the exit statuses of the commands that read the data directory.

Every command declares its own parser (`add_parser` with help and description, then its
arguments): those declarations look alike because argparse is written that way, and stay with
their commands; what the commands share in meaning lives here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from config import ConfigError, default_config, load_gateway
from config.store import StoreConfig
from gateway.env_file import environment_for

EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_INVALID_CONFIG = 2
#: A database (or server) the command needs cannot be reached.
EXIT_UNAVAILABLE = 69


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


def located(args: argparse.Namespace) -> tuple[Path, StoreConfig] | None:
    """The data directory (`--data-dir` wins over gateway.yaml's) and the session store of
    `add_location_arguments`; None once the configuration's problems are printed."""
    try:
        loaded = (
            load_gateway(args.config, environment_for(args.config))
            if args.config
            else default_config()
        )
    except ConfigError as error:
        print_problems(error)
        return None
    data_dir = Path(args.data_dir) if args.data_dir is not None else loaded.gateway.data_dir
    return Path(data_dir), loaded.gateway.store


def print_problems(error: ConfigError) -> None:
    for problem in error.problems:
        print(f"error: {problem}", file=sys.stderr)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
