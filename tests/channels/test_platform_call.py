"""A platform call's failures come out as `channels.errors` types, whatever raised them."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from channels.errors import ChannelError, RateLimited, TransientError
from channels.retry import answers_of, platform_call, platform_calls


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


class SdkApiError(SdkError):
    """What the platform answered, as opposed to a request the SDK would not build."""


async def test_answers_go_to_the_translation_and_unbuildable_requests_are_refusals() -> None:
    only_answers = answers_of(SdkApiError, translate, channel="fake")
    with pytest.raises(RateLimited, match="send: slow down"):
        async with platform_call(
            "send", 5.0, channel="fake", sdk_errors=(SdkError,), translate=only_answers
        ):
            raise SdkApiError("slow down")
    with pytest.raises(ChannelError, match="send: bad argument") as refused:
        async with platform_call(
            "send", 5.0, channel="fake", sdk_errors=(SdkError,), translate=only_answers
        ):
            raise SdkError("bad argument")
    assert type(refused.value) is ChannelError
    assert refused.value.channel == "fake"


async def test_a_bound_platform_call_carries_its_channel_and_translation() -> None:
    fake_call = platform_calls(channel="fake", sdk_errors=(SdkError,), translate=translate)
    with pytest.raises(RateLimited, match="send: slow down"):
        async with fake_call("send", 5.0):
            raise SdkError("slow down")
    with pytest.raises(TransientError, match=r"fetch timed out after 0\.01 s") as late:
        async with fake_call("fetch", 0.01):
            await asyncio.Event().wait()
    assert late.value.channel == "fake"
