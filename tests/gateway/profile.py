"""One profile's services on a session store in a temporary folder, for tests of the pieces
that take them (the turn runner, the commands) without a dispatcher."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from prometheus_client import CollectorRegistry

from config import ProfileConfig
from gateway.metrics import GatewayMetrics
from gateway.services import ProfileServices
from sessions import ActiveTopics, SessionManager, SessionStore


@asynccontextmanager
async def profile_services(root: Path) -> AsyncIterator[ProfileServices]:
    async with SessionStore(root, fsync="never") as store:
        config = ProfileConfig.model_validate({"sessions": {"max_history": 50}})
        yield ProfileServices(
            "p",
            config,
            SessionManager(store),
            ActiveTopics(root),
            GatewayMetrics.create(CollectorRegistry()),
            root,
        )
