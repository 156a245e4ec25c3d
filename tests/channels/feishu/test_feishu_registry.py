"""The registry builds Feishu only with protobuf installed, and says how to install it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from channels.feishu import FeishuChannel
from channels.registry import ChannelContext, ChannelUnavailable, build_channel
from config import FeishuConfig

CONTEXT = ChannelContext("work", Path("data"))


def test_the_registry_builds_the_channel_with_its_allow_list() -> None:
    channel = build_channel(
        FeishuConfig(app_id="cli_a", app_secret="s", allow=["ou_alice"]), CONTEXT
    )
    assert isinstance(channel, FeishuChannel)
    assert channel.is_allowed("ou_alice")
    assert not channel.is_allowed("ou_mallory")


def test_without_protobuf_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.startswith(("channels.feishu", "google.protobuf"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "google.protobuf", None)
    with pytest.raises(ChannelUnavailable) as caught:
        build_channel(FeishuConfig(app_id="cli_a", app_secret="s"), CONTEXT)
    assert "needs the optional dependency protobuf" in str(caught.value)
    assert "pip install 'octos-gateway[feishu]'" in caught.value.suggestion
