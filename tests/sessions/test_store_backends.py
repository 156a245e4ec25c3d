"""Which store a configuration gets, asyncpg imported only for PostgreSQL, and its absence."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import SecretStr

from config.store import StoreConfig
from sessions import SessionStore
from sessions.backends import StoreBackendMissing, check_store, session_store
from sessions.postgres import PostgresSessionStore

REPO = Path(__file__).resolve().parents[2]
POSTGRES = StoreConfig(backend="postgres", dsn=SecretStr("postgresql://u:pw@127.0.0.1:1/db"))


def test_the_default_is_the_file_store(tmp_path: Path) -> None:
    store = session_store(StoreConfig(), tmp_path / "main", read_only=True)
    assert isinstance(store, SessionStore)
    assert store.read_only


def test_postgres_gets_a_store_scoped_by_the_profile(tmp_path: Path) -> None:
    store = session_store(POSTGRES, tmp_path / "main", read_only=True)
    assert isinstance(store, PostgresSessionStore)
    assert store.scope == "main"
    assert store.read_only
    assert store.where == "postgresql://u:***@127.0.0.1:1/db"


def test_asyncpg_is_not_imported_for_the_file_store() -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys, tempfile
        from pathlib import Path
        from config.store import StoreConfig
        import gateway.cli, gateway.daemon.profile, gateway.cli.stores
        from sessions.backends import check_store, session_store

        asyncio.run(check_store(StoreConfig()))
        session_store(StoreConfig(), Path(tempfile.mkdtemp()))
        print("asyncpg" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


async def test_without_asyncpg_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [name for name in sys.modules if name.startswith("sessions.postgres")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    with pytest.raises(StoreBackendMissing, match=r"pip install 'octos-gateway\[postgres\]'"):
        await check_store(POSTGRES)
