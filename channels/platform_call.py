"""One platform call with a deadline, whose failures come out as `channels.errors` types.

Every SDK channel wraps its calls the same way: a timeout becomes `TransientError("… timed out
after N s")`, a network error (`aiohttp.ClientError`, `OSError`) `TransientError("… failed")`,
and the SDK's own exceptions go through the channel's translation (status codes and platform
error codes to `RateLimited`, `AuthError`, `MessageTooLong`, ...). A channel says only which
SDK exceptions it translates and how, once (`platform_calls`):

    line_call = platform_calls(channel=CHANNEL, sdk_errors=(OpenApiException,),
                               translate=answers_of(ApiException, translate, channel=CHANNEL))
    async with line_call("get_bot_info", timeout_s):
        info = await api.get_bot_info()

Most SDKs raise one exception type for the platform's answers and others for requests they
refused to build; `answers_of` is that translation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypeVar

import aiohttp

from channels.errors import ChannelError, TransientError

Translate = Callable[[Exception, str], ChannelError]
#: `platform_call` bound to one channel: `(what, timeout_s)` to an `async with` block.
PlatformCall = Callable[[str, float], AbstractAsyncContextManager[None]]
E = TypeVar("E", bound=Exception)


def answers_of(
    api_error: type[E], translate: Callable[[E, str], ChannelError], *, channel: str
) -> Translate:
    """A `Translate` for an SDK that raises `api_error` for what the platform answered (given
    to `translate`) and other exceptions for requests it refused to build: those become a
    plain `ChannelError`, since re-sending the same request cannot help."""

    def translated(error: Exception, what: str) -> ChannelError:
        if isinstance(error, api_error):
            return translate(error, what)
        return ChannelError(f"{what}: {error}", channel=channel)

    return translated


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


def platform_calls(
    *,
    channel: str,
    sdk_errors: tuple[type[Exception], ...] = (),
    translate: Translate = _untranslated,
) -> PlatformCall:
    """`platform_call` with one channel's name, SDK exceptions and translation bound."""

    def call(what: str, timeout_s: float) -> AbstractAsyncContextManager[None]:
        return platform_call(
            what, timeout_s, channel=channel, sdk_errors=sdk_errors, translate=translate
        )

    return call
