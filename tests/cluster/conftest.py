"""The cluster tests' NATS and PostgreSQL fixtures: one database for this directory's tests, each
in profiles of its own (`fresh_scope`), and stream prefixes of each test's own."""

from __future__ import annotations

from tests.support.nats import nats_client, nats_prefix
from tests.support.postgres import postgres_dsn

__all__ = ["nats_client", "nats_prefix", "postgres_dsn"]  # the fixtures, for this directory
