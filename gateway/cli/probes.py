"""The live checks of `octos-gateway doctor`: each one a coroutine that returns a `ProbeResult`.

Every probe finishes within its timeout and never raises: a failure is a result with the fix a
user should try. Channels are probed through their own `Channel.probe()` (built by the registry,
so a channel added later is probed without code here); the agent and the transcription endpoint
through their model lists; NATS and PostgreSQL when a URL or DSN is configured; the ports by
binding them.

A port already taken may be this configuration's running daemon or another program (or another
octos-gateway). A bind test cannot tell them apart (both refuse the bind), nor can asking the
port's /healthz (every octos-gateway answers it alike); the socket's owner can, read from
Linux's /proc: the listening socket's inode, among the open files of the pid that holds this
configuration's journal.
"""

from __future__ import annotations

import asyncio
import errno
import importlib
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import aiohttp
from pydantic import BaseModel

from channels.errors import AuthError, ChannelError
from channels.registry import ChannelConfigLike, ChannelContext, build_channel
from config import AgentConfig, OpenAIAgentConfig, TranscriptionConfig
from config.bus import NatsConfig
from gateway.cli.run_overrides import bind_error

PROC = Path("/proc")
#: The `st` column of /proc/net/tcp for a listening socket.
_LISTEN = "0A"


def listening_holder(port: int, pids: Iterable[int]) -> int | None:
    """The one of `pids` with a socket listening on `port`, or None when none of them has.

    Raises OSError when /proc does not say (another system, or no /proc/net/tcp).
    """
    sockets = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    for pid in pids:
        fds = PROC / str(pid) / "fd"
        try:
            names = os.listdir(fds)
        except OSError:
            continue  # gone, or another user's: not a holder this check can see
        for name in names:
            try:
                if os.readlink(fds / name) in sockets:
                    return pid
            except OSError:
                continue  # closed meanwhile
    return None


def _listening_inodes(port: int) -> set[int]:
    inodes: set[int] = set()
    tables = [PROC / "net" / "tcp", PROC / "net" / "tcp6"]
    present = [table for table in tables if table.exists()]
    if not present:
        raise FileNotFoundError(f"{tables[0]} does not exist")
    for table in present:
        for line in table.read_text(encoding="ascii").splitlines()[1:]:
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            if int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(int(fields[9]))
    return inodes


#: Longest wait of one probe unless `doctor --timeout` says otherwise.
DEFAULT_TIMEOUT_S = 10.0


# A check's verdict in the doctor's table: a warning or a failure comes with its fix.
class Outcome(Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One line of the doctor's table; `fix` says what to do when it is not ok."""

    check: str
    outcome: Outcome
    detail: str
    fix: str = ""


async def probe_channel(
    profile: str, config: ChannelConfigLike, data_dir: Path, timeout_s: float
) -> ProbeResult:
    check = f"{profile}: channel {config.type}"
    try:
        channel = build_channel(config, ChannelContext(profile=profile, data_dir=data_dir))
    except ChannelError as error:
        return ProbeResult(check, Outcome.FAIL, str(error).split("; ")[0], error.suggestion)
    try:
        async with asyncio.timeout(timeout_s):
            who = await channel.probe()
    except TimeoutError:
        return ProbeResult(
            check, Outcome.FAIL, f"no answer within {timeout_s:g} s", _reach_fix(config)
        )
    except AuthError as error:
        return ProbeResult(check, Outcome.FAIL, _without_suggestion(error), error.suggestion)
    except ChannelError as error:
        return ProbeResult(
            check,
            Outcome.FAIL,
            _without_suggestion(error),
            error.suggestion or _reach_fix(config),
        )
    finally:
        await channel.stop()
    if who is None:
        return ProbeResult(check, Outcome.SKIP, "nothing to probe (no remote credentials)")
    return ProbeResult(check, Outcome.OK, who)


def _reach_fix(config: ChannelConfigLike) -> str:
    """The fix for a server that did not answer, naming the channel's own keys that say where
    it is (`base_url`, Matrix's `homeserver`, email's `imap.host` and `smtp.host`): the
    config models are the one place that knows, so a channel added later is named as well."""
    keys = _server_keys(config)
    if not keys:
        return "check the network and the channel's server settings"
    return f"check the network and the channel's {' and '.join(keys)}"


def _server_keys(config: object) -> list[str]:
    model = type(config)
    if not issubclass(model, BaseModel):
        return []
    keys: list[str] = []
    for name, field in model.model_fields.items():
        if name == "homeserver" or name.endswith(("base_url", "ws_url")):
            keys.append(name)
        elif _has_host(field.annotation):
            keys.append(f"{name}.host")  # a server of its own (email's imap and smtp)
    return keys


def _has_host(annotation: object) -> bool:
    return (
        isinstance(annotation, type)
        and issubclass(annotation, BaseModel)
        and "host" in annotation.model_fields
    )


def _without_suggestion(error: ChannelError) -> str:
    text = ChannelError.__str__(error)
    return text.removesuffix(f"; {error.suggestion}") if error.suggestion else text


async def probe_agent(profile: str, config: AgentConfig, timeout_s: float) -> ProbeResult:
    check = f"{profile}: agent {config.type}"
    if isinstance(config, OpenAIAgentConfig):
        return await _probe_openai(check, config, timeout_s)
    if config.type == "echo":
        return ProbeResult(check, Outcome.OK, "built in, nothing to reach")
    return ProbeResult(check, Outcome.SKIP, "not probed: a request would run a turn")


async def _probe_openai(check: str, config: OpenAIAgentConfig, timeout_s: float) -> ProbeResult:
    key = config.api_key.get_secret_value() if config.api_key else None
    return await _probe_models(check, config.base_url, key, config.model, "agent.model", timeout_s)


async def probe_transcription(
    profile: str, config: TranscriptionConfig, timeout_s: float
) -> ProbeResult:
    """The transcription endpoint's model list, as for the openai agent: a transcription itself
    would need audio and may cost money."""
    key = config.api_key.get_secret_value() if config.api_key else None
    return await _probe_models(
        f"{profile}: transcription",
        config.base_url,
        key,
        config.model,
        "transcription.model",
        timeout_s,
    )


async def _probe_models(
    check: str, base_url: str, api_key: str | None, model: str, model_key: str, timeout_s: float
) -> ProbeResult:
    """GET /models of an OpenAI-compatible server: reached, the key taken, `model` listed."""
    import openai  # the agent's own SDK, already a dependency

    client = openai.AsyncOpenAI(
        base_url=base_url, api_key=api_key or "no-key", timeout=timeout_s, max_retries=0
    )
    try:
        async with asyncio.timeout(timeout_s):
            models = [listed.id async for listed in client.models.list()]
    except openai.AuthenticationError:
        return ProbeResult(
            check,
            Outcome.FAIL,
            f"{base_url} refused the API key (401)",
            "check api_key (or the environment variable it names)",
        )
    except openai.NotFoundError:
        return ProbeResult(
            check,
            Outcome.WARN,
            f"{base_url} answers but has no model list",
            "fine for servers without GET /models; send a message to be sure",
        )
    except (openai.APIConnectionError, TimeoutError):
        return ProbeResult(
            check,
            Outcome.FAIL,
            f"cannot reach {base_url} within {timeout_s:g} s",
            "check base_url and that the server is running",
        )
    except openai.APIStatusError as error:
        return ProbeResult(
            check,
            Outcome.FAIL,
            f"{base_url} answered HTTP {error.status_code}",
            "check base_url and the server's logs",
        )
    finally:
        await client.close()
    if model not in models:
        shown = ", ".join(models[:5]) or "none"
        return ProbeResult(
            check,
            Outcome.WARN,
            f"model {model!r} is not in the server's list ({shown})",
            f"check the model name in the profile's {model_key}",
        )
    return ProbeResult(check, Outcome.OK, f"model {model} at {base_url}")


async def probe_nats(config: NatsConfig, timeout_s: float) -> ProbeResult:
    """Reach NATS and its JetStream as `run` does, within the configured connect timeout (and
    the doctor's); nats-py is imported only when the NATS bus is configured."""
    check = f"nats {config.redacted_url}"
    try:
        from gateway.cluster.connection import BusUnavailable, check_bus
    except ModuleNotFoundError:
        return ProbeResult(
            check, Outcome.FAIL, "nats-py is not installed", "pip install 'octos-gateway[nats]'"
        )
    connect_timeout_s = min(config.connect_timeout_s, timeout_s)
    bounded = config.model_copy(update={"connect_timeout_s": connect_timeout_s})
    try:
        async with asyncio.timeout(timeout_s):
            await check_bus(bounded)
    except BusUnavailable as error:
        return ProbeResult(check, Outcome.FAIL, f"cannot use it: {error.detail}", error.fix)
    except TimeoutError:
        return ProbeResult(
            check,
            Outcome.FAIL,
            f"no answer within {timeout_s:g} s",
            "check that nats-server runs there with JetStream enabled (-js)",
        )
    return ProbeResult(check, Outcome.OK, "connected, JetStream answers")


async def probe_postgres(dsn: str, timeout_s: float) -> ProbeResult:
    """Connect to PostgreSQL with asyncpg (imported only when a DSN is configured)."""
    check = "postgresql"
    try:
        asyncpg = importlib.import_module("asyncpg")
    except ModuleNotFoundError:
        return ProbeResult(check, Outcome.FAIL, "asyncpg is not installed", "pip install asyncpg")

    async def connect_and_close() -> None:
        connection = await asyncpg.connect(dsn, timeout=timeout_s)
        await connection.close()

    return await _connection_probe(
        check,
        connect_and_close,
        asyncpg.PostgresError,
        "check the DSN and that PostgreSQL runs",
        timeout_s,
    )


async def _connection_probe(
    check: str,
    connect_and_close: Callable[[], Awaitable[None]],
    client_error: type[Exception],
    fix: str,
    timeout_s: float,
) -> ProbeResult:
    """OK when a server lets its client connect within `timeout_s`; else FAIL with `fix`."""
    try:
        async with asyncio.timeout(timeout_s):
            await connect_and_close()
    except (OSError, TimeoutError, client_error) as error:
        return ProbeResult(check, Outcome.FAIL, f"cannot connect: {type(error).__name__}", fix)
    return ProbeResult(check, Outcome.OK, "connected")


async def probe_port(
    what: str, host: str, port: int, timeout_s: float, *, our_pids: frozenset[int]
) -> ProbeResult:
    """A port the daemon will listen on: free, or held by this configuration's running daemon
    (one of `our_pids`, the pids in its journals' locks)."""
    check = f"port {host}:{port} ({what})"
    if port == 0:
        return ProbeResult(check, Outcome.OK, "0: a free port is picked at start")
    error = await asyncio.to_thread(bind_error, host, port)
    if error is None:
        return ProbeResult(check, Outcome.OK, "free")
    if error.errno != errno.EADDRINUSE:
        return ProbeResult(check, Outcome.FAIL, f"cannot listen: {error.strerror}", "check host")
    fix = "stop it, or choose another port in the config (run --http-port / --api-port)"
    is_octos = await _answers_like_octos(f"http://{url_host(host)}:{port}/healthz", timeout_s)
    try:
        holder = await asyncio.to_thread(listening_holder, port, our_pids)
    except OSError:
        if not is_octos:
            return ProbeResult(check, Outcome.FAIL, "already in use by another program", fix)
        return ProbeResult(
            check,
            Outcome.WARN,
            "in use by an octos-gateway; which one cannot be told here (no /proc)",
            f"if it is not this configuration's daemon: {fix}",
        )
    if holder is not None:
        return ProbeResult(
            check, Outcome.OK, f"in use by this configuration's octos-gateway (pid {holder})"
        )
    holder_kind = "another octos-gateway" if is_octos else "another program"
    return ProbeResult(check, Outcome.FAIL, f"already in use by {holder_kind}", fix)


async def _answers_like_octos(health_url: str, timeout_s: float) -> bool:
    """Whether `health_url` answers as an octos-gateway's health server does (any one's)."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.get(health_url) as response,
        ):
            body = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False
    return isinstance(body, dict) and body.get("status") == "ok"


def url_host(host: str) -> str:
    """`host` as the host part of a URL that reaches a listener bound to it."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
