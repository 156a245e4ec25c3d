"""SIGHUP in a cluster, per process: a `--role ingress` and a `--role worker` each reload their
profiles as one daemon does (an added profile starts, a changed one restarts with its new
settings, a removed one stops), and the cluster answers through the reloaded profiles."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.support.daemon import DaemonProcess, free_port
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

TIMEOUT = aiohttp.ClientTimeout(total=30)


def api_profile(port: int, agent: str = "{type: echo}") -> str:
    return f"agent: {agent}\nchannels: [{{type: api, port: {port}}}]\n"


async def ask(port: int, content: str) -> tuple[int, dict[str, Any]]:
    body = {"chat_id": "reload", "content": content}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{port}/v1/chat", json=body, timeout=TIMEOUT) as reply,
    ):
        answer: dict[str, Any] = await reply.json()
        return reply.status, answer


def nth(event: str, profile: str, n: int) -> Callable[[dict[str, Any]], bool]:
    """Matches the `n`th log event named `event` about `profile` (1 is the first)."""
    seen = 0

    def matches(logged: dict[str, Any]) -> bool:
        nonlocal seen
        if logged.get("event") == event and logged.get("profile") == profile:
            seen += 1
        return seen == n

    return matches


def listening(port: int, n: int) -> Callable[[dict[str, Any]], bool]:
    """Matches the `n`th time an API channel on `port` said it listens."""
    seen = 0

    def matches(logged: dict[str, Any]) -> bool:
        nonlocal seen
        if logged.get("event") == "api.web_chat_ready" and f":{port}/" in logged["url"]:
            seen += 1
        return seen == n

    return matches


async def reload(daemon: DaemonProcess, n: int) -> dict[str, Any]:
    """SIGHUP, and the `n`th reload's summary of what changed."""
    daemon.signal(signal.SIGHUP)
    count = 0

    def matches(logged: dict[str, Any]) -> bool:
        nonlocal count
        count += logged.get("event") == "reload.profiles_changed"
        return count == n

    return await daemon.wait_log(matches)


async def test_sighup_reloads_an_ingress_and_a_worker_each_on_its_own(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    alpha, beta = fresh_scope(), fresh_scope()
    alpha_port, beta_port = free_port(), free_port()
    async with processes() as running:
        config = cluster_config(
            tmp_path,
            {alpha: api_profile(alpha_port)},
            prefix=nats_prefix,
            dsn=postgres_dsn,
            extra_nats=", max_deliver: 2",
        )
        worker = await start_role(config, "worker")
        running.append(worker)
        ingress = await start_role(config, "ingress", ready="api.web_chat_ready")
        running.append(ingress)
        status, answer = await ask(alpha_port, "before")
        assert (status, answer["reply"]) == (200, "before")

        # alpha changes (its agent now fails on "boom"), beta is added.
        profiles = tmp_path / "profiles"
        (profiles / f"{alpha}.yaml").write_text(
            api_profile(alpha_port, "{type: echo, fail_when: boom}")
        )
        (profiles / f"{beta}.yaml").write_text(api_profile(beta_port))
        for daemon in (worker, ingress):
            changes = await reload(daemon, 1)
            assert (changes["added"], changes["changed"], changes["removed"]) == (
                [beta],
                [alpha],
                [],
            )
            await daemon.wait_log(nth("profile.stopped", alpha, 1))
            await daemon.wait_log(nth("profile.started", alpha, 2))
            await daemon.wait_log(nth("profile.started", beta, 1))
        # The ingress's API channels listen again (alpha's) and anew (beta's) once they say so.
        await ingress.wait_log(listening(alpha_port, 2))
        await ingress.wait_log(listening(beta_port, 1))
        status, answer = await ask(beta_port, "new profile")
        assert (status, answer["reply"]) == (200, "new profile")
        # The worker runs alpha's new agent: the message fails and is set aside.
        status, answer = await ask(alpha_port, "boom")
        assert status == 500, answer
        assert answer["error"].startswith("Sorry, I could not answer that: agent error.")
        status, answer = await ask(alpha_port, "after")
        assert (status, answer["reply"]) == (200, "after")

        # beta is removed: both processes stop it, alpha keeps answering.
        (profiles / f"{beta}.yaml").unlink()
        for daemon in (worker, ingress):
            changes = await reload(daemon, 2)
            assert (changes["added"], changes["changed"], changes["removed"]) == ([], [], [beta])
            await daemon.wait_log(nth("profile.stopped", beta, 1))
        with pytest.raises(aiohttp.ClientConnectionError):
            await ask(beta_port, "gone")
        status, answer = await ask(alpha_port, "still here")
        assert (status, answer["reply"]) == (200, "still here")
        turns = [e for e in worker.logs if e.get("event") == "turn.started"]
        assert len(turns) == 6  # before, new profile, boom twice (max_deliver 2), after, still
        for daemon in (ingress, worker):
            daemon.signal(signal.SIGTERM)
            assert await daemon.wait() == 0, daemon.logs[-10:]
