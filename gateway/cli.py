"""`octos-gateway`: run the daemon; init, check and doctor a config; pairing; sessions."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from config import ConfigError, LoadedConfig, default_config, load_gateway
from config.channels import DEFAULT_API_PORT
from gateway.cli_args import (
    EXIT_INVALID_CONFIG,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    CommandSet,
    Handler,
    add_config_argument,
    plural,
    print_problems,
)
from gateway.cluster_commands import ROLES, bus_client_missing, role_problem
from gateway.config_checks import usability_problems
from gateway.config_hint import explain_config_error
from gateway.dead_letter_commands import add_dead_letter_commands
from gateway.doctor import add_doctor_command
from gateway.env_file import environment_for
from gateway.init_command import add_init_command
from gateway.pair_commands import add_pair_commands
from gateway.run_overrides import busy_api_port, with_listen_overrides
from gateway.session_commands import add_session_commands
from gateway.store_commands import add_store_commands, store_unreachable
from gateway.terminal_logs import terminal_log_file


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
    from gateway.logs import configure_logging
    from gateway.profile_failure import diagnose

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
    # Declared as every command is (see gateway.cli_args): alike in argparse's form, not logic.
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

    check = commands.add(
        "check",
        cmd_check,
        help="validate a configuration",
        description="Validate gateway.yaml and every profile; exit 0 when valid, 2 when not.",
    )
    add_config_argument(check)

    add_session_commands(commands)
    add_store_commands(commands)
    add_dead_letter_commands(commands)
    add_doctor_command(commands)
    add_init_command(commands)
    add_pair_commands(commands)

    commands.add("version", cmd_version, help="print the version")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.func
    return handler(args)
