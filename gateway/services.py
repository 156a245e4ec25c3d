"""What the pieces of a profile are handed: the process's services and the profile's own.

`ProcessServices` is what the daemon gives every profile it starts, in one process or in a
cluster (the data directory, the session store's settings, the bus size, metrics, webhook routes,
the way to ask for shutdown and the pairing databases). `ProfileServices` is what one profile
builds once and gives whole to its turn runner, its commands and its dispatcher (or, in a
cluster worker, to the worker's answering side): its configuration, sessions, active topics,
the outbound side of its bus and its metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bus import AgentHandle
from config import ProfileConfig
from config.store import StoreConfig
from gateway.metrics import GatewayMetrics
from gateway.pairing_stores import PairingDatabases
from gateway.webhooks import WebhookRoutes
from sessions import SessionManager
from sessions.topics import ActiveTopicsStore


@dataclass(frozen=True, slots=True)
class ProcessServices:
    """Shared by every profile of the process; a profile's files are under `data_dir / id`."""

    data_dir: Path
    store: StoreConfig
    bus_capacity: int
    metrics: GatewayMetrics
    webhooks: WebhookRoutes
    request_shutdown: Callable[[], None]
    #: The pairing databases every profile of the process shares a pool and listener on.
    pairing: PairingDatabases


@dataclass(frozen=True, slots=True)
class ProfileServices:
    """One profile's shared state, built by the profile and taken whole by each of its parts."""

    profile: str
    config: ProfileConfig
    sessions: SessionManager
    topics: ActiveTopicsStore
    #: Where the profile's replies, snapshots and typing signals go.
    outbound: AgentHandle
    metrics: GatewayMetrics
