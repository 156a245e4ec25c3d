"""Sessions in PostgreSQL (asyncpg): imported only when gateway.yaml says `store: postgres`."""

from sessions.postgres.connect import StoreRefused, StoreUnavailable
from sessions.postgres.queries import UnsupportedStoredSchema
from sessions.postgres.schema import SCHEMA_VERSION, StoreSchemaTooNew, ensure_schema
from sessions.postgres.store import PostgresSessionStore

__all__ = [
    "SCHEMA_VERSION",
    "PostgresSessionStore",
    "StoreRefused",
    "StoreSchemaTooNew",
    "StoreUnavailable",
    "UnsupportedStoredSchema",
    "ensure_schema",
]
