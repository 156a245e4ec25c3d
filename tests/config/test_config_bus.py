"""gateway.yaml `bus`: the nats backend's settings, checked with file:line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import ConfigError, ConfigProblem, load_gateway
from config.bus import redact_url
from tests.support.config_files import WriteYaml

POSTGRES = 'store: {backend: postgres, dsn: "postgresql://u@127.0.0.1/db"}\n'


def with_profile(path: Path) -> None:
    (path.parent / "profiles").mkdir(exist_ok=True)
    (path.parent / "profiles" / "main.yaml").write_text("agent: {type: echo}\n")


def problems(path: Path) -> list[ConfigProblem]:
    """The problems of gateway.yaml itself (beside it, one valid profile)."""
    with_profile(path)
    with pytest.raises(ConfigError) as caught:
        load_gateway(path, env={})
    return caught.value.problems


def test_the_nats_bus_needs_sessions_in_postgres(write_yaml: WriteYaml) -> None:
    path = write_yaml("gateway.yaml", "data_dir: data\nbus:\n  backend: nats\n")
    (problem,) = problems(path)
    assert problem.line == 3
    assert "bus backend nats needs sessions in PostgreSQL" in problem.message
    assert "store: {backend: postgres" in problem.suggestion


def test_bad_nats_settings_point_at_their_line(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "gateway.yaml",
        POSTGRES
        + "bus:\n  backend: nats\n  nats:\n    url: http://127.0.0.1:4222\n"
        + "    stream_prefix: a.b\n    partitions: 0\n    retry_backoff_s: []\n",
    )
    found: dict[int, str] = {}
    for problem in problems(path):
        assert problem.line is not None
        found[problem.line] = str(problem)
    assert sorted(found) == [5, 6, 7, 8]
    assert "nats://127.0.0.1:4222" in found[5]
    assert "letters, digits, _ or -" in found[6]
    assert "at least 1" in found[7]
    assert "non-empty list" in found[8]


def test_a_valid_cluster_config_loads_with_its_defaults(write_yaml: WriteYaml) -> None:
    path = write_yaml("gateway.yaml", POSTGRES + "bus: {backend: nats}\n")
    with_profile(path)
    nats = load_gateway(path, env={}).gateway.bus.nats
    assert nats.servers == ["nats://127.0.0.1:4222"]
    assert (nats.stream_prefix, nats.partitions, nats.max_deliver) == ("OCTOS", 16, 5)


def test_a_password_in_the_url_is_never_shown() -> None:
    assert redact_url("nats://user:hunter2@nats:4222") == "nats://user:***@nats:4222"
    assert redact_url("nats://token@nats:4222") == "nats://***@nats:4222"
    assert redact_url("nats://nats:4222") == "nats://nats:4222"
