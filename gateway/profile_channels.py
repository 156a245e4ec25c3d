"""A profile's configured channels, built (and registered with its channel manager).

Shared by the single-process profile and a cluster's ingress: each channel gets the profile's
context (history, pairing overlay, shutdown), its web routes are mounted, and pairing is
switched on where the config asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from channels.base import Channel, ChatHistory
from channels.health import ChannelHealth
from channels.media_links import MediaLinks
from channels.outbound.manager import ChannelManager
from channels.registry import ChannelContext, build_channel
from channels.retry.pacing import Rate, RateLimits
from config import ProfileConfig
from config.channels.base import RateLimitsConfig, parse_rate
from gateway.pairing import Pairing
from gateway.services import WebhookRoutes


def build_channels(
    profile_id: str,
    config: ProfileConfig,
    root: Path,
    *,
    history: ChatHistory | None,
    pairing: Pairing,
    webhooks: WebhookRoutes,
    request_shutdown: Callable[[], None],
    media_links: MediaLinks | None = None,
) -> list[Channel]:
    """The profile's channels, each with its allow list and its webhook routes mounted."""
    context = ChannelContext(
        profile=profile_id,
        data_dir=root,
        history=history,
        request_shutdown=request_shutdown,
        allow_overlay=pairing.approved,
        agent=config.agent_summary(),
        agent_names=tuple(config.named_agents()),
        max_media_bytes=config.max_media_bytes,
        media_links=media_links,
        inbound_reactions=config.inbound_reactions,
    )
    channels: list[Channel] = []
    for channel_config in config.channels:
        channel = build_channel(channel_config, context)
        if channel_config.pairing:
            pairing.enable(channel.name)
        channels.append(channel)
        webhooks.mount(profile_id, channel.web_routes())
    return channels


def register_all(manager: ChannelManager, channels: list[Channel], config: ProfileConfig) -> None:
    """Register the built channels with the manager, each with its configured edit interval and
    send rates."""
    for channel, channel_config in zip(channels, config.channels, strict=True):
        manager.register(
            channel,
            edit_interval_s=channel_config.edit_interval_s,
            rate_limits=rate_limits(channel.rate_limits, channel_config.rate_limits),
        )


def rate_limits(published: RateLimits, override: RateLimitsConfig) -> RateLimits:
    """The platform's published rates with the profile's overrides applied."""

    def rate(configured: str | None, default: Rate | None) -> Rate | None:
        return default if configured is None else Rate(*parse_rate(configured))

    return RateLimits(
        account=rate(override.account, published.account),
        chat=rate(override.chat, published.chat),
        group=rate(override.group, published.group),
        paced=override.paced,
    )


def not_built_yet(config: ProfileConfig) -> dict[str, ChannelHealth]:
    """The health of a profile's channels while the profile is being built (its journal
    opened and replayed, which may take a while): each starting, so `/readyz` waits."""
    return {
        channel.type: ChannelHealth.starting("the profile is starting")
        for channel in config.channels
    }
