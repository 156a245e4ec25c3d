"""The `.env` beside gateway.yaml: secrets `init` names, read by every command that loads it.

Values already in the process environment win, as with Docker Compose, so a deployment can
override any of them. The file is read with python-dotenv (quoting, `export`, comments).
"""

from __future__ import annotations

import os
from pathlib import Path

from dotenv import dotenv_values

from config.interpolate import ENV_FILE

__all__ = ["ENV_FILE", "environment_for"]


def environment_for(config_path: Path) -> dict[str, str]:
    """os.environ over the `.env` beside `config_path` (when there is one)."""
    env_file = config_path.absolute().parent / ENV_FILE
    from_file = dotenv_values(env_file) if env_file.is_file() else {}
    merged = {key: value for key, value in from_file.items() if value is not None}
    merged.update(os.environ)
    return merged
