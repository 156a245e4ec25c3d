"""Fixtures for the channel layer: a fake clock whose sleeps return at once, metrics, a bus."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import NamedTuple, TypeVar

import pytest
from prometheus_client import CollectorRegistry

from bus import AgentHandle, BusPublisher, create_bus
from channels.metrics import ChannelMetrics
from channels.outbound.manager import ChannelManager
from channels.retry import no_jitter
from tests.channels.recording import RecordingChannel

PROFILE = "p1"
#: The SDKs' HTTP clients (aiohttp with `trust_env`, slack_sdk, line-bot-sdk, matrix-nio) read
#: these by themselves; a developer's proxy must not reach a test of a loopback fake.
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


FakeT = TypeVar("FakeT")


def fake_fixture(make: Callable[[], AbstractAsyncContextManager[FakeT]]) -> object:
    """A fixture serving a fresh fake (`make()`, e.g. the fake's class) for each test, shut down
    after it: assigned to the fixture's name in a platform's conftest.py (`fake = fake_fixture(
    FakeLine)`), where each platform wrote the same three lines."""

    async def serving() -> AsyncIterator[FakeT]:
        async with make() as fake:
            yield fake

    return pytest.fixture(serving)


@pytest.fixture(autouse=True)
def _no_ambient_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


class FakeClock:
    """Monotonic time that moves only when told to, or when something sleeps on it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(0.0, seconds)
        # Still a scheduling point, as a real sleep is.
        await asyncio.sleep(0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> ChannelMetrics:
    return ChannelMetrics(registry, PROFILE)


@pytest.fixture
def bus() -> tuple[AgentHandle, BusPublisher]:
    return create_bus(64)


ManagerFactory = Callable[..., ChannelManager]
ChannelFactory = Callable[..., RecordingChannel]


class Managed(NamedTuple):
    """A recording channel and the manager it is registered with."""

    channel: RecordingChannel
    manager: ChannelManager


ManagedFactory = Callable[..., Managed]


@pytest.fixture
def make_channel(clock: FakeClock) -> ChannelFactory:
    """Recording channels that timestamp their calls with the fake clock."""

    def make(
        *args: object, cls: type[RecordingChannel] = RecordingChannel, **kw: object
    ) -> RecordingChannel:
        return cls(*args, clock=clock, **kw)  # type: ignore[arg-type]

    return make


@pytest.fixture
def make_manager(
    clock: FakeClock, metrics: ChannelMetrics, bus: tuple[AgentHandle, BusPublisher]
) -> ManagerFactory:
    """A manager on the fake clock, without jitter, so every delay is exact."""

    def make(**overrides: object) -> ChannelManager:
        options: dict[str, object] = {
            "metrics": metrics,
            "clock": clock,
            "wall_clock": clock,
            "sleep": clock.sleep,
            "jitter": no_jitter,
            "stop_grace_s": 1.0,
        }
        options.update(overrides)
        return ChannelManager(PROFILE, bus[1], **options)  # type: ignore[arg-type]

    return make


@pytest.fixture
def agent(bus: tuple[AgentHandle, BusPublisher]) -> AgentHandle:
    """The agent's end of the bus: what the test sends stands for the agent's replies."""
    return bus[0]


@pytest.fixture
def managing(make_manager: ManagerFactory) -> ManagerFactory:
    """`make_manager(**overrides)` with these channels registered: `managing(*channels)`."""

    def make(*channels: RecordingChannel, **overrides: object) -> ChannelManager:
        manager = make_manager(**overrides)
        for channel in channels:
            manager.register(channel)
        return manager

    return make


@pytest.fixture
def managed(make_channel: ChannelFactory, managing: ManagerFactory) -> ManagedFactory:
    """`managed(**channel_options)`: a channel as `make_channel` makes it, and a manager (as
    `make_manager` makes it) that it is registered with."""

    def make(*args: object, **options: object) -> Managed:
        channel = make_channel(*args, **options)
        return Managed(channel, managing(channel))

    return make


@pytest.fixture
async def running() -> AsyncIterator[Callable[[ChannelManager], asyncio.Task[None]]]:
    """Start managers in the background; each is stopped (and awaited) at the end of the test."""
    started: list[tuple[ChannelManager, asyncio.Task[None]]] = []

    def start(manager: ChannelManager) -> asyncio.Task[None]:
        task = asyncio.create_task(manager.run(), name="manager-under-test")
        started.append((manager, task))
        return task

    yield start
    for manager, task in started:
        await asyncio.wait_for(manager.stop(), timeout=5)
        await asyncio.wait_for(task, timeout=5)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, {"profile": PROFILE, **labels})
    return 0.0 if value is None else value


@pytest.fixture
def serving(
    managing: ManagerFactory, running: Callable[[ChannelManager], asyncio.Task[None]]
) -> ManagerFactory:
    """`managing(*channels, **overrides)`, and the manager running until the end of the test."""

    def serve(*channels: RecordingChannel, **overrides: object) -> ChannelManager:
        manager = managing(*channels, **overrides)
        running(manager)
        return manager

    return serve
