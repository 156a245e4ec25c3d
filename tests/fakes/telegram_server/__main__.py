"""`python -m tests.fakes.telegram_server [--host H] [--port N] [--token T]`: serve until ^C."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Sequence

from tests.fakes.telegram_server.server import DEFAULT_TOKEN, FakeTelegram


async def serve(host: str, port: int, token: str) -> None:
    async with FakeTelegram(token, host=host, port=port) as fake:
        print(fake.base_url, flush=True)
        await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake Telegram Bot API server for tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.token))


if __name__ == "__main__":
    main()
