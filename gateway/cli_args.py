"""Arguments several commands share, accepted before or after a command's action."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


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


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
