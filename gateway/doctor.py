"""`octos-gateway doctor -c FILE`: the command; the checks live in `gateway.doctor_report`.

They import aiohttp, the channel registry and the agent's SDK: only when the command runs, so
that every other command starts as fast as before.
"""

from __future__ import annotations

import argparse

from gateway.cli_args import CommandSet, add_config_argument

DEFAULT_TIMEOUT_S = 10.0


def add_doctor_command(commands: CommandSet) -> None:
    # Declared as every command is (see gateway.cli_args): alike in argparse's form, not logic.
    doctor = commands.add(
        "doctor",
        cmd_doctor,
        help="check the configuration and probe credentials, agent and ports",
        description="Validate like `check`, print the warnings `run` would log, then probe "
        "each channel's credentials, each agent, NATS/PostgreSQL when configured, and the "
        "ports. One line per check, with the fix for each failure; exit 0 when none failed.",
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
    from gateway.doctor_report import doctor_exit_status

    return doctor_exit_status(args.config, args.timeout)
