"""`octos-gateway`: run the daemon; init, check and doctor a config; pairing; sessions; send.

`doctor`'s checks live in `gateway.cli.doctor`: they import aiohttp, the channel registry and
the agent's SDK, so they are imported only when the command runs, and every other command
starts fast.

Logs are kept off the chat. The terminal channel talks on stdout; the daemon logs on stderr. On a
terminal both are the same screen, so log lines would land in the middle of the conversation. When
a profile has a `cli` channel and stderr is a terminal, the logs go to
`{data_dir}/octos-gateway.log` instead, and one line on stderr says where. Piped or redirected,
stderr stays as it is.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TextIO

from config import CliChannelConfig, ConfigError, LoadedConfig, default_config, load_gateway
from config.channels import DEFAULT_API_PORT
from gateway.cli.args import (
    EXIT_INVALID_CONFIG,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    CommandSet,
    Handler,
    add_config_argument,
    environment_for,
    plural,
    print_problems,
)
from gateway.cli.cluster import ROLES, bus_client_missing, role_problem
from gateway.cli.config_checks import explain_config_error, usability_problems
from gateway.cli.dead_letters import add_dead_letter_commands
from gateway.cli.init import add_init_command
from gateway.cli.messages import add_message_commands
from gateway.cli.pairing import add_pair_commands
from gateway.cli.run_overrides import busy_api_port, with_listen_overrides
from gateway.cli.sessions import add_session_commands
from gateway.cli.stores import add_store_commands, store_unreachable

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


DEFAULT_TIMEOUT_S = 10.0


def add_doctor_command(commands: CommandSet) -> None:
    doctor = commands.add(
        "doctor", cmd_doctor, help="check the configuration and probe credentials, agent and ports"
    )
    add_config_argument(doctor)
    doctor.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"longest wait for each probe (default {DEFAULT_TIMEOUT_S:g})",
    )


def cmd_doctor(args: argparse.Namespace) -> int:
    """Validate like `check`, print the warnings `run` would log, then probe each channel's
    credentials, each agent, NATS/PostgreSQL when configured, and the ports. One line per check,
    with the fix for each failure; exit 0 when none failed."""
    from gateway.cli.doctor import doctor_exit_status

    return doctor_exit_status(args.config, args.timeout)


def package_version() -> str:
    try:
        return version("octos-gateway")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0+unknown"


def print_config_error(error: ConfigError) -> None:
    print_problems(error)
    print(f"{plural(len(error.problems), 'problem')} in the configuration", file=sys.stderr)


def load(config_path: Path | None, data_dir: Path | None) -> LoadedConfig:
    try:
        if config_path is None:
            loaded = default_config()
        else:
            loaded = load_gateway(config_path, environment_for(config_path))
    except ConfigError as error:
        raise explain_config_error(config_path, error) if config_path else error from None
    if data_dir is not None:
        loaded = loaded.with_data_dir(data_dir)
    return loaded


def cmd_run(args: argparse.Namespace) -> int:
    from gateway.daemon import Daemon
    from gateway.daemon.profile import diagnose
    from gateway.logs import configure_logging

    listen = {
        "api_host": args.api_host,
        "api_port": args.api_port,
        "http_host": args.http_host,
        "http_port": args.http_port,
    }
    try:
        loaded = with_listen_overrides(load(args.config, args.data_dir), **listen)
    except ConfigError as error:
        print_config_error(error)
        return EXIT_INVALID_CONFIG
    # A worker runs no channel: the API ports are an ingress's to bind.
    if args.role != "worker" and (busy := busy_api_port(loaded)) is not None:
        print(f"error: {busy}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if (wrong_role := role_problem(loaded, args.role)) is not None:
        print(f"error: {wrong_role}", file=sys.stderr)
        return EXIT_INVALID_CONFIG
    # NATS is not asked here: the daemon waits for it (up to bus.nats.connect_timeout_s) while
    # /readyz says it is not ready, since compose starts NATS and the processes together.
    for unreachable in (store_unreachable(loaded), bus_client_missing(loaded)):
        if unreachable is not None:
            print(f"error: {unreachable}", file=sys.stderr)
            return EXIT_UNAVAILABLE
    try:
        log_stream = terminal_log_file(loaded)
    except OSError as error:
        # The data directory the logs were to go to cannot hold them: what a profile would
        # have failed on next, said the same way.
        failure = diagnose(error, Path(loaded.gateway.data_dir))
        if not failure.known:
            raise
        print(f"error: {failure.summary()}", file=sys.stderr)
        return failure.exit_status
    configure_logging(
        loaded.gateway.logging.level,
        loaded.gateway.logging.format,
        log_stream,
        once_per_process=True,
    )
    reload_config: Callable[[], LoadedConfig] | None = None
    if args.config is not None:
        config_path, data_dir = args.config, args.data_dir

        def reload_config() -> LoadedConfig:
            return with_listen_overrides(load(config_path, data_dir), **listen)

    try:
        return asyncio.run(Daemon(loaded, reload_config, role=args.role).run())
    finally:
        if log_stream is not None:
            log_stream.close()


def cmd_check(args: argparse.Namespace) -> int:
    """Validate gateway.yaml and every profile; exit 0 when valid, 2 when not."""
    try:
        loaded = load(args.config, None)
    except ConfigError as error:
        print_config_error(error)
        return EXIT_INVALID_CONFIG
    # Valid, but `run` would fail on it here: listeners on one port, an unusable data_dir.
    if problems := usability_problems(loaded):
        print_config_error(ConfigError(problems))
        return EXIT_INVALID_CONFIG
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    profiles = ", ".join(loaded.profiles) or "none"
    print(f"ok: {args.config} is valid ({plural(len(loaded.profiles), 'profile')}: {profiles})")
    return EXIT_OK


def cmd_version(_args: argparse.Namespace) -> int:
    print(f"octos-gateway {package_version()}")
    return EXIT_OK


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0-65535; 0 picks a free one)")
    return port


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="octos-gateway",
        description="Connects an AI agent to chat platforms; one YAML profile per bot.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    commands = CommandSet(parser, dest="command", metavar="COMMAND")

    run = commands.add(
        "run",
        cmd_run,
        help="run the daemon",
        description="Run the daemon. Without -c: one profile with the HTTP API channel and the "
        f"echo agent on http://127.0.0.1:{DEFAULT_API_PORT}, data in ./data.",
    )
    run.add_argument("-c", "--config", type=Path, help="gateway.yaml (default: embedded default)")
    run.add_argument("--data-dir", type=Path, help="where sessions live (overrides data_dir)")
    run.add_argument("--api-host", metavar="HOST", help="address of the web chat and HTTP API")
    run.add_argument("--api-port", type=_port, metavar="PORT", help="port of the web chat and API")
    run.add_argument("--http-host", metavar="HOST", help="address of the status/health server")
    run.add_argument("--http-port", type=_port, metavar="PORT", help="port of the status server")
    run.add_argument(
        "--role",
        choices=ROLES,
        default="all",
        help="in a cluster (bus backend nats): ingress runs the channels, worker the agents, "
        "all both (the default)",
    )

    check = commands.add("check", cmd_check, help="validate a configuration")
    add_config_argument(check)

    add_session_commands(commands)
    add_store_commands(commands)
    add_dead_letter_commands(commands)
    add_doctor_command(commands)
    add_init_command(commands)
    add_pair_commands(commands)
    add_message_commands(commands)

    commands.add("version", cmd_version, help="print the version")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.func
    return handler(args)
