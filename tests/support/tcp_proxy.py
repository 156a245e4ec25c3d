"""A TCP forwarder on 127.0.0.1 that a test can cut: a network partition without root.

`cut()` closes every forwarded connection and stops listening, so a client sees its server
vanish and cannot reconnect until the test is over.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

_CHUNK = 65536


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the proxy is not listening")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._forward, "127.0.0.1", 0)

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    async def _forward(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        try:
            server_reader, server = await asyncio.open_connection(*self._target)
        except OSError:
            client.close()
            return
        self._writers.update((client, server))
        pumps = {
            asyncio.create_task(_pump(client_reader, server), name="proxy:up"),
            asyncio.create_task(_pump(server_reader, client), name="proxy:down"),
        }
        self._pumps.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._pumps.difference_update(pumps)
            for writer in (client, server):
                writer.close()
                self._writers.discard(writer)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with suppress(ConnectionError):
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()


@asynccontextmanager
async def tcp_proxy(target_host: str, target_port: int) -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy(target_host, target_port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.cut()
