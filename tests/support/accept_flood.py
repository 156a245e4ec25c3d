"""A listener that runs out of file descriptors, for the accept-error log test.

`python -m tests.support.accept_flood N` listens on 127.0.0.1, lowers its own open-file limit to
just above what it has open, prints the port, and exits once asyncio has reported N accept
failures, printing how many there were; its JSON log lines are on stderr.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
from typing import Any

from channels.web.guard import AcceptErrorLog, install_accept_error_log
from gateway.logs import configure_logging


async def main(failures: int) -> None:
    configure_logging("info", "json")
    loop = asyncio.get_running_loop()
    enough = asyncio.Event()
    handler = install_accept_error_log(loop, 60.0)

    def counting(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        handler(loop, context)
        if handler.errors.total >= failures:
            enough.set()

    loop.set_exception_handler(counting)
    server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 2, hard))
    print(port, flush=True)
    async with asyncio.timeout(30):
        await enough.wait()
    print(f"accept failures: {handler.errors.total}", flush=True)
    assert isinstance(handler, AcceptErrorLog)
    server.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
