"""A real Matrix homeserver, Synapse, for the tests the fake homeserver cannot settle alone.

Synapse is installed from PyPI into a virtual environment of its own (`.ci/run` makes it at
`/opt/octos-test/synapse`, or set `OCTOS_TEST_SYNAPSE` to another one's python). Each server
runs on 127.0.0.1 with SQLite, no federation and generous rate limits, in a directory of the
test's, and can be stopped and started again on the same port and data, as an outage is. Users
are registered with the server's shared secret (the admin API), as an operator would.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
import yaml

from tests.support.daemon import free_port

SYNAPSE_PYTHON = Path(os.environ.get("OCTOS_TEST_SYNAPSE", "/opt/octos-test/synapse/bin/python"))
SERVER_NAME = "octos.test"
#: Longest wait for Synapse to answer after a start (its first start creates the database).
START_WAIT_S = 120.0
#: Generous enough that no test meets a limit it does not look for.
_UNLIMITED = {"per_second": 1000, "burst_count": 1000}


def require_synapse() -> Path:
    """Synapse's python; skips the test when it is missing, except in CI, where it fails."""
    if SYNAPSE_PYTHON.is_file() and os.access(SYNAPSE_PYTHON, os.X_OK):
        return SYNAPSE_PYTHON
    reason = (
        f"Synapse is missing at {SYNAPSE_PYTHON}: `python3 -m venv /opt/octos-test/synapse && "
        "/opt/octos-test/synapse/bin/pip install matrix-synapse`, or set OCTOS_TEST_SYNAPSE"
    )
    if os.environ.get("CI", "").lower() not in {"", "0", "false"}:
        pytest.fail(f"{reason} (CI must run the real-server tests; .ci/run installs it)")
    pytest.skip(reason)


@dataclass(frozen=True)
class MatrixUser:
    user_id: str
    access_token: str


class Synapse:
    """One homeserver in `directory`; `start()` and `stop()` as often as a test needs."""

    def __init__(self, python: Path, directory: Path) -> None:
        self._python = python
        self._directory = directory
        self.port = free_port()
        self.homeserver = f"http://127.0.0.1:{self.port}"
        self._shared_secret = secrets.token_hex(16)
        self._process: asyncio.subprocess.Process | None = None
        self._config = self._write_config()

    def _write_config(self) -> Path:
        directory = self._directory
        directory.mkdir(parents=True, exist_ok=True)
        config = directory / "homeserver.yaml"
        subprocess.run(
            [
                str(self._python),
                "-m",
                "synapse.app.homeserver",
                "--server-name",
                SERVER_NAME,
                "--config-path",
                str(config),
                "--data-directory",
                str(directory),
                "--generate-config",
                "--report-stats=no",
            ],
            check=True,
            capture_output=True,
            cwd=directory,
        )
        settings: dict[str, Any] = yaml.safe_load(config.read_text(encoding="utf-8"))
        log_config = directory / "log.yaml"
        log_config.write_text(
            yaml.safe_dump(
                {
                    "version": 1,
                    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(message)s"}},
                    "handlers": {
                        "file": {
                            "class": "logging.FileHandler",
                            "filename": str(directory / "homeserver.log"),
                            "formatter": "plain",
                        }
                    },
                    "root": {"level": "WARNING", "handlers": ["file"]},
                    "disable_existing_loggers": False,
                }
            ),
            encoding="utf-8",
        )
        settings.update(
            {
                "listeners": [
                    {
                        "port": self.port,
                        "bind_addresses": ["127.0.0.1"],
                        "type": "http",
                        "tls": False,
                        "x_forwarded": False,
                        "resources": [{"names": ["client"], "compress": False}],
                    }
                ],
                "database": {
                    "name": "sqlite3",
                    "args": {"database": str(directory / "homeserver.db")},
                },
                "log_config": str(log_config),
                "media_store_path": str(directory / "media"),
                "pid_file": str(directory / "homeserver.pid"),
                "registration_shared_secret": self._shared_secret,
                "enable_registration": False,
                "trusted_key_servers": [],
                "suppress_key_server_warning": True,
                "federation_domain_whitelist": [],
                "presence": {"enabled": False},
                "url_preview_enabled": False,
                "rc_message": _UNLIMITED,
                "rc_registration": _UNLIMITED,
                "rc_login": {
                    "address": _UNLIMITED,
                    "account": _UNLIMITED,
                    "failed_attempts": _UNLIMITED,
                },
                "rc_joins": {"local": _UNLIMITED, "remote": _UNLIMITED},
                "rc_invites": {
                    "per_room": _UNLIMITED,
                    "per_user": _UNLIMITED,
                    "per_issuer": _UNLIMITED,
                },
            }
        )
        config.write_text(yaml.safe_dump(settings), encoding="utf-8")
        return config

    async def start(self) -> None:
        """Starts the server and waits until its client API answers."""
        assert self._process is None, "already running"
        with (self._directory / "stdout.log").open("ab") as output:
            self._process = await asyncio.create_subprocess_exec(
                str(self._python),
                "-m",
                "synapse.app.homeserver",
                "-c",
                str(self._config),
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=self._directory,
                env={k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}},
            )
        deadline = time.monotonic() + START_WAIT_S
        async with aiohttp.ClientSession() as session:
            while True:
                if self._process.returncode is not None:
                    raise RuntimeError(f"Synapse exited at start: {self.last_output()}")
                try:
                    async with session.get(f"{self.homeserver}/_matrix/client/versions") as reply:
                        if reply.status == 200:
                            return
                except aiohttp.ClientError:
                    pass  # not listening yet: asked again below, until the deadline
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Synapse did not answer: {self.last_output()}")
                # Polled: Synapse gives no other sign that it listens.
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()

    @property
    def running(self) -> bool:
        return self._process is not None

    def last_output(self, lines: int = 30) -> str:
        text = ""
        for name in ("stdout.log", "homeserver.log"):
            path = self._directory / name
            if path.exists():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    async def register(self, localpart: str, *, admin: bool = False) -> MatrixUser:
        """A new user, registered with the shared secret as `register_new_matrix_user` does."""
        url = f"{self.homeserver}/_synapse/admin/v1/register"
        password = secrets.token_hex(12)
        async with aiohttp.ClientSession() as session:
            async with session.get(url) as reply:
                nonce = str((await reply.json())["nonce"])
            mac = hmac.new(self._shared_secret.encode(), digestmod=hashlib.sha1)
            for part in (nonce, localpart, password, "admin" if admin else "notadmin"):
                if part != nonce:
                    mac.update(b"\x00")
                mac.update(part.encode())
            body = {
                "nonce": nonce,
                "username": localpart,
                "password": password,
                "admin": admin,
                "mac": mac.hexdigest(),
            }
            async with session.post(url, json=body) as reply:
                answer = await reply.json()
                if reply.status != 200:
                    raise RuntimeError(f"cannot register {localpart}: {answer}")
        return MatrixUser(str(answer["user_id"]), str(answer["access_token"]))


class MatrixPerson:
    """A user at the homeserver through its client API: creates rooms, writes, reads."""

    def __init__(self, homeserver: str, user: MatrixUser) -> None:
        self.user = user
        self._api = f"{homeserver}/_matrix/client/v3"
        self._headers = {"Authorization": f"Bearer {user.access_token}"}

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        async with (
            aiohttp.ClientSession(headers=self._headers) as session,
            session.request(method, f"{self._api}{path}", json=body) as reply,
        ):
            answer = await reply.json()
            if reply.status != 200:
                raise RuntimeError(f"{method} {path}: {reply.status} {answer}")
            return answer

    async def create_room(self, invite: list[str]) -> str:
        answer = await self._call(
            "POST", "/createRoom", {"invite": invite, "preset": "private_chat"}
        )
        return str(answer["room_id"])

    async def say(self, room_id: str, text: str) -> str:
        path = f"/rooms/{quote(room_id)}/send/m.room.message/{uuid.uuid4().hex}"
        answer = await self._call("PUT", path, {"msgtype": "m.text", "body": text})
        return str(answer["event_id"])

    async def joined_members(self, room_id: str) -> set[str]:
        answer = await self._call("GET", f"/rooms/{quote(room_id)}/joined_members")
        return set(answer["joined"])

    async def shown(self, room_id: str, sender: str) -> list[str]:
        """The room's messages from `sender` as a client shows them: each with its latest edit."""
        events: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            query = f"?dir=b&limit=1000{f'&from={quote(token)}' if token else ''}"
            page = await self._call("GET", f"/rooms/{quote(room_id)}/messages{query}")
            events.extend(page.get("chunk", []))
            token = page.get("end")
            if not page.get("chunk") or token is None:
                break
        events.reverse()
        shown: dict[str, str] = {}
        for event in events:
            if event.get("type") != "m.room.message" or event.get("sender") != sender:
                continue
            content = event.get("content", {})
            relates = content.get("m.relates_to", {})
            if relates.get("rel_type") == "m.replace":
                if relates.get("event_id") in shown:
                    shown[relates["event_id"]] = content.get("m.new_content", {}).get("body", "")
            elif "body" in content:
                shown[event["event_id"]] = content["body"]
        return list(shown.values())
