"""gateway.yaml `store`: the JSONL default, PostgreSQL with a DSN, file:line errors, no password."""

from __future__ import annotations

import pytest

from config import ConfigError, ConfigProblem, load_gateway
from config.store import StoreConfig, redact_dsn
from tests.support.config_files import WriteYaml


def gateway_problems(write_yaml: WriteYaml, text: str) -> list[ConfigProblem]:
    write_yaml("profiles/main.yaml", "channels: [{type: cli}]\n")
    path = write_yaml("gateway.yaml", text)
    with pytest.raises(ConfigError) as caught:
        load_gateway(path, env={})
    return caught.value.problems


def test_the_default_is_the_session_files(write_yaml: WriteYaml) -> None:
    write_yaml("profiles/main.yaml", "channels: [{type: cli}]\n")
    loaded = load_gateway(write_yaml("gateway.yaml", "data_dir: data\n"), env={})
    assert loaded.gateway.store == StoreConfig()
    assert loaded.gateway.store.backend == "jsonl"


def test_postgres_with_a_dsn_from_the_environment(write_yaml: WriteYaml) -> None:
    write_yaml("profiles/main.yaml", "channels: [{type: cli}]\n")
    path = write_yaml("gateway.yaml", "store: {backend: postgres, dsn: '${PG_DSN}'}\n")
    loaded = load_gateway(path, env={"PG_DSN": "postgresql://octos:s3cret@db:5432/octos"})
    store = loaded.gateway.store
    assert store.backend == "postgres"
    assert store.dsn is not None
    assert store.dsn.get_secret_value() == "postgresql://octos:s3cret@db:5432/octos"
    assert store.redacted_dsn == "postgresql://octos:***@db:5432/octos"
    assert "s3cret" not in repr(store)


def test_postgres_without_a_dsn_names_the_key_and_its_line(write_yaml: WriteYaml) -> None:
    problems = gateway_problems(
        write_yaml,
        """
        data_dir: data
        store:
          backend: postgres
        """,
    )
    assert len(problems) == 1
    assert problems[0].line == 2
    assert "store.dsn is required with backend postgres" in str(problems[0])


def test_unknown_keys_and_bad_values_get_their_lines(write_yaml: WriteYaml) -> None:
    problems = gateway_problems(
        write_yaml,
        """
        store:
          backend: mongodb
          dns: postgresql://x@y/z
        """,
    )
    texts = [(problem.line, problem.message) for problem in problems]
    assert texts[0][0] == 2
    assert "backend" in texts[0][1]
    assert texts[1][0] == 3
    assert "unknown key 'dns'" in texts[1][1]


def test_a_dsn_that_is_not_postgres_is_refused_without_its_password(
    write_yaml: WriteYaml,
) -> None:
    problems = gateway_problems(
        write_yaml,
        """
        store:
          backend: postgres
          dsn: mysql://root:topsecret@db/octos
        """,
    )
    assert len(problems) == 1
    assert problems[0].line == 3
    assert "postgresql://user:password@host:5432/db" in str(problems[0])
    assert "topsecret" not in str(problems[0])
    assert "mysql://root:***@db/octos" in str(problems[0])


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:p%40ss@h:5432/d", "postgresql://u:***@h:5432/d"),
        ("postgresql://u@h/d", "postgresql://u@h/d"),
        (
            "postgres://h/d?password=pw&sslmode=require",
            "postgres://h/d?password=***&sslmode=require",
        ),
        ("postgresql://u:a@b@h/d", "postgresql://u:***@h/d"),
    ],
)
def test_redaction_hides_every_password(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown
