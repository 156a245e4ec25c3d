"""NATS servers of one test's own: `nats-server -js` nodes on free ports, each storing in its own
directory under the test's tmp dir, joined by `--cluster` routes when there are several.

A fresh JetStream cluster has no meta leader until a majority of its servers have found each
other: what the gateway meets when it starts together with NATS (as docker compose starts them).
`start()` returns as soon as the servers it starts accept clients, while the cluster still
forms, and may start some now and the rest later; `wait_meta_leader()` waits for a node to log
that there is a JetStream meta leader. Every server is killed (SIGKILL, by its own process) on
the way out.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.daemon import free_port

NATS_SERVER = shutil.which("nats-server")
#: In what a node logs once the JetStream cluster has a meta leader: "Self is new JetStream
#: cluster metadata leader" on the leader, "JetStream cluster new metadata leader: n1/..." on
#: the others.
META_LEADER = "metadata leader"
#: What a node logs once it accepts clients.
READY_LINE = "Server is ready"


@dataclass
class NatsNode:
    name: str
    port: int
    cluster_port: int
    store: Path
    process: asyncio.subprocess.Process | None = None
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None


class NatsCluster:
    """`size` JetStream servers; one alone runs without a `--cluster` block."""

    def __init__(self, directory: Path, size: int) -> None:
        self._directory = directory
        self.nodes = [
            NatsNode(f"n{index}", free_port(), free_port(), directory / f"n{index}")
            for index in range(size)
        ]
        self._logged = asyncio.Condition()

    @property
    def url(self) -> str:
        """Every node, as `bus.nats.url` takes several servers."""
        return ",".join(f"nats://127.0.0.1:{node.port}" for node in self.nodes)

    def _arguments(self, node: NatsNode) -> list[str]:
        arguments = ["-js", "-a", "127.0.0.1", "-p", str(node.port), "-n", node.name]
        arguments += ["-sd", str(node.store)]
        if len(self.nodes) > 1:
            routes = ",".join(f"nats://127.0.0.1:{other.cluster_port}" for other in self.nodes)
            arguments += ["--cluster_name", "octos-test", "--routes", routes]
            arguments += ["--cluster", f"nats://127.0.0.1:{node.cluster_port}"]
        return arguments

    async def start(self, count: int | None = None) -> None:
        """The next `count` nodes not started yet (all by default); returns once each accepts
        clients, before JetStream has a leader (a lone node of several never has one)."""
        if NATS_SERVER is None:
            pytest.fail("nats-server is needed on PATH for a test's own cluster", pytrace=False)
        waiting = [node for node in self.nodes if node.process is None]
        starting = waiting if count is None else waiting[:count]
        for node in starting:
            node.store.mkdir(parents=True, exist_ok=True)
            node.process = await asyncio.create_subprocess_exec(
                NATS_SERVER,
                *self._arguments(node),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            node.reader = asyncio.create_task(self._read(node), name=f"nats-log:{node.name}")
        for node in starting:
            await self._wait_line(lambda line: READY_LINE in line, [node])

    async def _read(self, node: NatsNode) -> None:
        assert node.process is not None
        assert node.process.stderr is not None
        async for raw in node.process.stderr:
            async with self._logged:
                node.lines.append(raw.decode(errors="replace").rstrip())
                self._logged.notify_all()
        async with self._logged:
            self._logged.notify_all()

    async def _wait_line(self, matches: Callable[[str], bool], nodes: list[NatsNode]) -> None:
        """Until one of `nodes` has logged a line that `matches`; fails if one of them exits."""

        def seen() -> bool:
            for node in nodes:
                if any(matches(line) for line in node.lines):
                    return True
                assert node.process is not None
                if node.process.returncode is not None or (node.reader and node.reader.done()):
                    raise AssertionError(f"nats-server {node.name} exited: {node.lines[-10:]}")
            return False

        async with asyncio.timeout(30), self._logged:
            await self._logged.wait_for(seen)

    async def wait_meta_leader(self) -> None:
        """Until a node has logged a JetStream meta leader (one server alone needs none)."""
        if len(self.nodes) > 1:
            await self._wait_line(lambda line: META_LEADER in line, self.nodes)

    async def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.returncode is None:
                node.process.kill()
                await node.process.wait()
            if node.reader is not None:
                await node.reader


@asynccontextmanager
async def nats_servers(directory: Path, size: int) -> AsyncIterator[NatsCluster]:
    """`size` NATS servers of the caller's own (not yet started), killed on the way out."""
    cluster = NatsCluster(directory, size)
    try:
        yield cluster
    finally:
        await cluster.stop()
