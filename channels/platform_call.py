"""One platform call with a deadline, whose failures come out as `channels.errors` types.

Every SDK channel wraps its calls the same way: a timeout becomes `TransientError("… timed out
after N s")`, a network error (`aiohttp.ClientError`, `OSError`) `TransientError("… failed")`,
and the SDK's own exceptions go through the channel's translation (status codes and platform
error codes to `RateLimited`, `AuthError`, `MessageTooLong`, ...). A channel says only which
SDK exceptions it translates and how:

    @asynccontextmanager
    async def line_call(what: str, timeout_s: float) -> AsyncIterator[None]:
        async with platform_call(what, timeout_s, channel=CHANNEL,
                                 sdk_errors=(OpenApiException,), translate=_translate):
            yield
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import aiohttp

from channels.errors import ChannelError, TransientError

Translate = Callable[[Exception, str], ChannelError]


def _untranslated(error: Exception, what: str) -> ChannelError:
    return ChannelError(f"{what}: {error}")


@asynccontextmanager
async def platform_call(
    what: str,
    timeout_s: float,
    *,
    channel: str,
    sdk_errors: tuple[type[Exception], ...] = (),
    translate: Translate = _untranslated,
) -> AsyncIterator[None]:
    """Run the block within `timeout_s`; raise only `ChannelError`s for what it raises."""
    try:
        async with asyncio.timeout(timeout_s):
            yield
    except sdk_errors as error:
        # The SDK's own exceptions first: some of them are also network errors.
        raise translate(error, what) from error
    except TimeoutError as error:
        raise TransientError(f"{what} timed out after {timeout_s:g} s", channel=channel) from error
    except (aiohttp.ClientError, OSError) as error:
        raise TransientError(f"{what} failed: {error!r}", channel=channel) from error
