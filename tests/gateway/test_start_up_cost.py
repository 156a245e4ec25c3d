"""What start-up costs: a profile that does not use a heavy SDK never imports it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_daemon_and_an_echo_profile_never_import_the_openai_sdk() -> None:
    script = (
        "import sys\n"
        "import gateway.cli, gateway.daemon, gateway.daemon.profile\n"
        "from config import EchoAgentConfig\n"
        "from gateway.agents import create_agent\n"
        "create_agent(EchoAgentConfig())\n"
        "print('openai' in sys.modules)\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    assert shown.stdout.strip() == "False"


def test_the_openai_agent_is_still_importable_by_name() -> None:
    from gateway.agents import OpenAICompatAgent

    assert OpenAICompatAgent.kind == "openai"
