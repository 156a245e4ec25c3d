"""README.md stays true: the configuration reference, the test command, the CLI commands and
the channel tables."""

from __future__ import annotations

from pathlib import Path

from config.describe import END_MARKER, START_MARKER, markdown_reference

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
TEST_COMMAND = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[dev]' && pytest"


def test_config_reference_matches_the_models() -> None:
    start = README.index(START_MARKER)
    end = README.index(END_MARKER) + len(END_MARKER)
    assert README[start:end] == markdown_reference(), (
        "README.md's configuration reference is out of date: "
        "replace it with the output of `python -m config.describe`"
    )


def test_every_config_key_is_in_the_readme() -> None:
    from config.describe import describe_config_keys

    missing = [key for key, _kind, _text in describe_config_keys() if f"`{key}`" not in README]
    assert missing == []


def test_ci_runs_the_readme_test_command() -> None:
    assert TEST_COMMAND in README
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_every_cli_command_is_documented() -> None:
    from gateway.cli import build_parser

    parser = build_parser()
    subparsers = parser._subparsers
    assert subparsers is not None
    commands = subparsers._group_actions[0].choices
    assert commands is not None
    for name in commands:
        assert f"octos-gateway {name}" in README, name


def table_first_column(heading_row: str) -> set[str]:
    """The first cells (backticks dropped) of the README table whose header row is given."""
    rows = README[README.index(heading_row) :].split("\n\n", 1)[0].splitlines()[2:]
    return {row.split("|")[1].strip().strip("`") for row in rows}


def test_every_channel_type_has_its_row_and_its_delivery_guarantee() -> None:
    from channels.registry import CHANNEL_TYPES, PLUGIN_TYPE

    assert table_first_column("| type | library | receives by |") == {*CHANNEL_TYPES, PLUGIN_TYPE}
    # A plugin's guarantee is its own; every built-in channel states its own.
    assert table_first_column("| channel | acknowledged to the platform |") == set(CHANNEL_TYPES)
