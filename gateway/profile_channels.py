"""A profile's configured channels, built and registered with its channel manager.

Shared by the single-process profile and a cluster's ingress: each channel gets the profile's
context (history, pairing overlay, shutdown), its web routes are mounted, and pairing is
switched on where the config asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from channels.history import ChatHistory
from channels.manager import ChannelManager
from channels.registry import ChannelContext, build_channel
from config import ProfileConfig
from gateway.pairing import Pairing
from gateway.webhooks import WebhookRoutes


def register_channels(
    profile_id: str,
    config: ProfileConfig,
    root: Path,
    channels: ChannelManager,
    *,
    history: ChatHistory | None,
    pairing: Pairing,
    webhooks: WebhookRoutes,
    request_shutdown: Callable[[], None],
) -> None:
    context = ChannelContext(
        profile=profile_id,
        data_dir=root,
        history=history,
        request_shutdown=request_shutdown,
        allow_overlay=pairing.overlay,
        agent=config.agent.type,
    )
    for channel_config in config.channels:
        channel = build_channel(channel_config, context)
        if channel_config.pairing:
            pairing.enable(channel.name)
        channels.register(channel, edit_interval_s=channel_config.edit_interval_s)
        webhooks.mount(profile_id, channel.web_routes())
