"""What `octos-gateway doctor` reports: everything `check` does, then live probes, as one table.

Each line is one check: the configuration, the data directory and listeners on one port (as
`check` finds them), each warning `run` would print, every channel's credentials (through
`Channel.probe()`), every agent, NATS and PostgreSQL when configured, and the ports the daemon
will listen on. A failed line says how to fix it. Exit status 0 when nothing failed (warnings
allowed), 1 otherwise.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import TextIO

from pydantic import SecretStr

from config import (
    ApiChannelConfig,
    ChannelConfig,
    ConfigError,
    ConfigProblem,
    LoadedConfig,
    load_gateway,
)
from gateway.cli.args import ENV_FILE, environment_for
from gateway.cli.config_checks import data_dir_problems, explain_config_error, listener_clashes
from gateway.cli.probes import (
    Outcome,
    ProbeResult,
    probe_agent,
    probe_channel,
    probe_nats,
    probe_port,
    probe_postgres,
    probe_transcription,
    url_host,
)
from gateway.cli.scaffold import placeholder_variable
from gateway.daemon.profile import JOURNAL_DIR
from gateway.logs import configure_logging
from sessions.wal import lock_pid

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1


def doctor_exit_status(config_path: Path, timeout_s: float) -> int:
    """Run every check, print the table and the totals; 0 when nothing failed, 1 otherwise."""
    # The table says what each probe found: a client's own warnings (a refused NATS connection,
    # retried) would only repeat it, amid the table on stdout. Errors still go to stderr.
    configure_logging("error", "console", sys.stderr)
    results = run_doctor(config_path, timeout_s)
    print_table(results, sys.stdout)
    failed = sum(1 for result in results if result.outcome is Outcome.FAIL)
    warned = sum(1 for result in results if result.outcome is Outcome.WARN)
    print(f"\n{_count(failed, 'failure')}, {_count(warned, 'warning')}")
    return EXIT_UNHEALTHY if failed else EXIT_HEALTHY


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def run_doctor(config_path: Path, timeout_s: float) -> list[ProbeResult]:
    try:
        loaded = load_gateway(config_path, environment_for(config_path))
    except ConfigError as error:
        return [
            ProbeResult(f"config {config_path}", Outcome.FAIL, _where(problem), problem.suggestion)
            for problem in explain_config_error(config_path, error).problems
        ]
    static = [_config_line(config_path, loaded), _status_page_line(loaded)]
    static += _data_dir_lines(loaded)
    static += [
        ProbeResult("listeners", Outcome.FAIL, _where(problem), problem.suggestion)
        for problem in listener_clashes(loaded)
    ]
    static += [ProbeResult("warning", Outcome.WARN, str(w)) for w in loaded.warnings]
    return static + asyncio.run(_live_probes(loaded, timeout_s, _running_daemon_pids(loaded)))


def _where(problem: ConfigProblem) -> str:
    place = f"{problem.file}:{problem.line}" if problem.line is not None else str(problem.file)
    return f"{place}: {problem.message}"


def _data_dir_lines(loaded: LoadedConfig) -> list[ProbeResult]:
    data_dir = loaded.gateway.data_dir
    problems = data_dir_problems(loaded)
    if not problems:
        return [ProbeResult("data dir", Outcome.OK, f"{data_dir}: this user can write it")]
    return [
        ProbeResult("data dir", Outcome.FAIL, _where(problem), problem.suggestion)
        for problem in problems
    ]


def _status_page_line(loaded: LoadedConfig) -> ProbeResult:
    http = loaded.gateway.http
    url = f"http://{url_host(http.host)}:{http.port}/"
    if http.token is not None:
        return ProbeResult("status page", Outcome.OK, f"{url} behind http.token")
    if http.is_loopback:
        return ProbeResult("status page", Outcome.OK, f"{url} open on this machine")
    return ProbeResult(
        "status page",
        Outcome.WARN,
        f"{url} stays closed: http listens on {http.host} without http.token",
        "set http.token in gateway.yaml to open it (the page asks for the token once)",
    )


def _config_line(path: Path, loaded: LoadedConfig) -> ProbeResult:
    names = ", ".join(loaded.profiles) or "none"
    return ProbeResult(
        f"config {path}", Outcome.OK, f"valid, {_count(len(loaded.profiles), 'profile')}: {names}"
    )


def _running_daemon_pids(loaded: LoadedConfig) -> frozenset[int]:
    """The pids in this configuration's journal locks: its daemon, when one runs, holds them
    (and its ports)."""
    data_dir = loaded.gateway.data_dir
    return frozenset(
        pid
        for profile_id in loaded.profiles
        if (pid := lock_pid(data_dir / profile_id / JOURNAL_DIR)) is not None
    )


async def _live_probes(
    loaded: LoadedConfig, timeout_s: float, ours: frozenset[int]
) -> list[ProbeResult]:
    async with asyncio.TaskGroup() as tasks:
        running = [
            tasks.create_task(probe, name=f"doctor:{name}")
            for name, probe in _probes(loaded, timeout_s, ours)
        ]
    return [task.result() for task in running]


def _probes(
    loaded: LoadedConfig, timeout_s: float, ours: frozenset[int]
) -> Iterable[tuple[str, Coroutine[None, None, ProbeResult]]]:
    gateway = loaded.gateway
    data_dir = Path(gateway.data_dir)
    env_file = (loaded.source or Path("gateway.yaml")).parent / ENV_FILE
    for profile_id, profile in loaded.profiles.items():
        for channel in profile.channels:
            placeholders = _placeholders_in(channel)
            if placeholders:
                # Sent to the platform it would only be refused, with advice about the token.
                result = ProbeResult(
                    f"{profile_id}: channel {channel.type}",
                    Outcome.FAIL,
                    f"{' and '.join(placeholders)} {'is' if len(placeholders) == 1 else 'are'} "
                    "still the placeholder from init",
                    f"replace the placeholder in {env_file}",
                )
                yield f"{profile_id}:{channel.type}", _known(result)
                continue
            probe = probe_channel(profile_id, channel, data_dir / profile_id, timeout_s)
            yield f"{profile_id}:{channel.type}", probe
        yield f"{profile_id}:agent", probe_agent(profile_id, profile.agent, timeout_s)
        if profile.transcription is not None:
            yield (
                f"{profile_id}:transcription",
                probe_transcription(profile_id, profile.transcription, timeout_s),
            )
    if gateway.bus.backend == "nats":
        yield "nats", probe_nats(gateway.bus.nats, timeout_s)
    dsn = gateway.store.dsn or getattr(gateway.bus, "postgres_dsn", None)
    if dsn is not None:
        secret = getattr(dsn, "get_secret_value", None)
        yield "postgresql", probe_postgres(secret() if secret else str(dsn), timeout_s)
    http = gateway.http
    yield "port:http", probe_port("health", http.host, http.port, timeout_s, our_pids=ours)
    for profile_id, profile in loaded.profiles.items():
        for channel in profile.channels:
            if isinstance(channel, ApiChannelConfig):
                what = f"{profile_id} api"
                yield (
                    f"port:{profile_id}:api",
                    probe_port(what, channel.host, channel.port, timeout_s, our_pids=ours),
                )


def _placeholders_in(channel: ChannelConfig) -> list[str]:
    """The variables `init` named whose placeholder is still `channel`'s secret."""
    found: list[str] = []
    for field in type(channel).model_fields:
        value = getattr(channel, field)
        if isinstance(value, SecretStr):
            variable = placeholder_variable(value.get_secret_value())
            if variable is not None:
                found.append(variable)
    return found


async def _known(result: ProbeResult) -> ProbeResult:
    return result


def print_table(results: list[ProbeResult], out: TextIO) -> None:
    width = max([len("CHECK"), *(len(result.check) for result in results)])
    out.write(f"{'CHECK':<{width}}  RESULT  DETAIL\n")
    for result in results:
        out.write(f"{result.check:<{width}}  {result.outcome.value:<6}  {result.detail}\n")
        if result.fix and result.outcome in (Outcome.FAIL, Outcome.WARN):
            out.write(f"{'':<{width}}          fix: {result.fix}\n")
