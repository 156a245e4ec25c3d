"""A platform call's failures come out as `channels.errors` types, whatever raised them."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from channels.errors import ChannelError, RateLimited, TransientError
from channels.platform_call import platform_call


class SdkError(Exception):
    pass


def translate(error: Exception, what: str) -> ChannelError:
    return RateLimited(3.0, f"{what}: {error}", channel="fake")


async def test_a_call_past_its_deadline_is_transient() -> None:
    with pytest.raises(TransientError, match=r"send timed out after 0\.01 s"):
        async with platform_call("send", 0.01, channel="fake"):
            await asyncio.Event().wait()


@pytest.mark.parametrize("error", [aiohttp.ClientConnectionError("reset"), OSError("refused")])
async def test_network_errors_are_transient(error: Exception) -> None:
    with pytest.raises(TransientError, match="send failed") as caught:
        async with platform_call("send", 5.0, channel="fake"):
            raise error
    assert caught.value.channel == "fake"
    assert caught.value.__cause__ is error


async def test_the_sdks_own_errors_go_through_the_translation() -> None:
    with pytest.raises(RateLimited, match="send: slow down") as caught:
        async with platform_call(
            "send", 5.0, channel="fake", sdk_errors=(SdkError,), translate=translate
        ):
            raise SdkError("slow down")
    assert caught.value.retry_after_s == 3.0


async def test_other_errors_pass_through_untouched() -> None:
    with pytest.raises(KeyError):
        async with platform_call("send", 5.0, channel="fake", sdk_errors=(SdkError,)):
            raise KeyError("a bug")
