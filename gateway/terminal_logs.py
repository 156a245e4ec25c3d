"""Logs kept off the chat: with a terminal channel on a terminal, they go to a file.

The terminal channel talks on stdout; the daemon logs on stderr. On a terminal both are the
same screen, so log lines would land in the middle of the conversation. When a profile has a
`cli` channel and stderr is a terminal, the logs go to `{data_dir}/octos-gateway.log` instead,
and one line on stderr says where. Piped or redirected, stderr stays as it is.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from config import CliChannelConfig, LoadedConfig

LOG_FILE = "octos-gateway.log"


def terminal_log_file(loaded: LoadedConfig, stderr: TextIO | None = None) -> TextIO | None:
    """The file to log to instead of stderr, opened for appending; None to keep stderr."""
    err = stderr or sys.stderr
    has_terminal_channel = any(
        isinstance(channel, CliChannelConfig)
        for profile in loaded.profiles.values()
        for channel in profile.channels
    )
    if not has_terminal_channel or not err.isatty():
        return None
    path = Path(loaded.gateway.data_dir) / LOG_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"logs go to {path} (this terminal is the chat; /quit to stop)", file=err)
    return path.open("a", encoding="utf-8", buffering=1)
