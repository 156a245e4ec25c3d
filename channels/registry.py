"""Which module builds each channel type, imported only when a profile uses that type.

Platform SDKs are optional extras and slow to import: a profile without Discord never imports
discord.py. A type maps to a `"module:factory"` string; the factory is called as
`create(config, context) -> Channel`; a platform package whose channel needs only its config and
the data directory declares it as `create = channel_factory(XChannel)`. Type `plugin` names a
class of the user's own (`class_path: "pkg.module:Class"`), constructed as `Class(config, context)`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Protocol, TypeVar

from channels.access.allow import AllowList, ApprovedSenders
from channels.base import Channel, ChatHistory
from channels.errors import ChannelError
from channels.media_files import DEFAULT_MAX_MEDIA_BYTES
from channels.media_links import MediaLinks

CHANNEL_TYPES: Mapping[str, str] = MappingProxyType(
    {
        "telegram": "channels.telegram:create",
        "discord": "channels.discord:create",
        "slack": "channels.slack:create",
        "api": "channels.api:create",
        "cli": "channels.cli:create",
        "twilio": "channels.twilio:create",
        "whatsapp": "channels.whatsapp:create",
        "line": "channels.line:create",
        "matrix": "channels.matrix:create",
        "email": "channels.email:create",
        "feishu": "channels.feishu:create",
        "wecom": "channels.wecom:create",
        "wecom-bot": "channels.wecom_bot:create",
        "qq-bot": "channels.qq:create",
    }
)

PLUGIN_TYPE = "plugin"

#: The optional dependency behind a type: (top-level module it imports, distribution, extra).
_OPTIONAL_SDKS: Mapping[str, tuple[str, str, str]] = MappingProxyType(
    {
        "telegram": ("telegram", "python-telegram-bot", "telegram"),
        "discord": ("discord", "discord.py", "discord"),
        "slack": ("slack_bolt", "slack-bolt", "slack"),
        "twilio": ("twilio", "twilio", "twilio"),
        "line": ("linebot", "line-bot-sdk", "line"),
        "matrix": ("nio", "matrix-nio", "matrix"),
        "email": ("imap_tools", "imap-tools", "email"),
        "feishu": ("google", "protobuf", "feishu"),
    }
)


class ChannelConfigLike(Protocol):
    """What the registry reads of a channel's config (the `config` package's models)."""

    @property
    def type(self) -> str: ...

    @property
    def allow(self) -> Sequence[str | int]: ...

    @property
    def edit_interval_s(self) -> float | None: ...


def _no_shutdown() -> None:
    """Outside a daemon there is nothing to shut down."""


@dataclass(frozen=True, slots=True)
class ChannelContext:
    """What a channel may need beyond its config: whose it is and where it may keep files."""

    profile: str
    data_dir: Path
    #: Read access to the profile's sessions (the HTTP API lists them); None outside a daemon.
    history: ChatHistory | None = None
    #: Asks the daemon to shut down cleanly (the terminal channel's `/quit`).
    request_shutdown: Callable[[], None] = _no_shutdown
    #: Senders approved by pairing, by channel name; None outside a daemon.
    allow_overlay: ApprovedSenders | None = None
    #: The profile's agent type (the web chat page says who answers).
    agent: str = ""
    #: The names of the profile's agents (`default` first): the API channel's models.
    agent_names: tuple[str, ...] = ("default",)
    #: Largest file a user sends that is downloaded (the profile's `max_media_bytes`).
    max_media_bytes: int = DEFAULT_MAX_MEDIA_BYTES
    #: The process's signed links to files it keeps (a reply's files on a platform that takes a
    #: URL); None outside a daemon.
    media_links: MediaLinks | None = None
    #: Whether the profile passes users' reactions on (`inbound_reactions`): a platform that
    #: sends them only when asked (Telegram's `message_reaction`) is asked only then, and one
    #: whose reactions may cost a call to read (Feishu's name no chat) makes it only then.
    inbound_reactions: bool = False


class ChannelUnavailable(ChannelError):
    """A configured channel type that cannot be built in this installation."""


def build_channel(config: ChannelConfigLike, context: ChannelContext) -> Channel:
    """Import the type's module (now, not before), build the channel, apply its allow list."""
    if config.type == PLUGIN_TYPE:
        target = _plugin_class_path(config)
    else:
        target = CHANNEL_TYPES.get(config.type, "")
        if not target:
            known = ", ".join([*CHANNEL_TYPES, PLUGIN_TYPE])
            raise ChannelUnavailable(
                f"unknown channel type {config.type!r}", suggestion=f"use one of: {known}"
            )
    factory = _load(config.type, target)
    channel = factory(config, context)
    if not isinstance(channel, Channel):
        raise ChannelUnavailable(
            f"{target} returned {type(channel).__name__}, not a Channel",
            suggestion="the factory or plugin class must build a channels.base.Channel",
        )
    overlay = context.allow_overlay
    approved = overlay.view(channel.name) if overlay is not None else None
    channel.allow = AllowList(config.allow, approved)
    channel.max_media_bytes = context.max_media_bytes
    channel.media_links = context.media_links
    return channel


def _plugin_class_path(config: ChannelConfigLike) -> str:
    class_path = getattr(config, "class_path", None)
    if class_path is None:
        options = getattr(config, "options", None)
        if isinstance(options, Mapping):
            class_path = options.get("class_path")
        elif options is not None:
            class_path = getattr(options, "class_path", None)
    if not isinstance(class_path, str) or ":" not in class_path:
        raise ChannelUnavailable(
            "a plugin channel needs class_path",
            suggestion='set class_path: "package.module:ClassName"',
        )
    return class_path


def _load(channel_type: str, target: str) -> ChannelFactory:
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise _missing(channel_type, module_name, exc) from exc
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ChannelUnavailable(
            f"channel type {channel_type!r}: {module_name} has no {attribute}",
            suggestion=f"check the name after the colon in {target!r}",
        )
    return factory  # type: ignore[no-any-return]


def _missing(channel_type: str, module_name: str, exc: ModuleNotFoundError) -> ChannelUnavailable:
    missing = exc.name or module_name
    sdk = _OPTIONAL_SDKS.get(channel_type)
    if sdk is not None and missing.partition(".")[0] == sdk[0]:
        _, distribution, extra = sdk
        return ChannelUnavailable(
            f"channel type {channel_type!r} needs the optional dependency {distribution}",
            suggestion=f"pip install 'octos-gateway[{extra}]'",
        )
    if channel_type == PLUGIN_TYPE:
        return ChannelUnavailable(
            f"plugin channel module {module_name!r} cannot be imported (no module {missing!r})",
            suggestion="check class_path and that the plugin's package is installed",
        )
    return ChannelUnavailable(
        f"channel type {channel_type!r} is not available in this installation "
        f"(no module {missing!r})",
        suggestion="install a release of octos-gateway that ships it, or remove the channel",
    )


class ChannelFactory(Protocol):
    def __call__(self, config: ChannelConfigLike, context: ChannelContext, /) -> object: ...


_ConfigT = TypeVar("_ConfigT", contravariant=True)
_ChannelT = TypeVar("_ChannelT", bound=Channel, covariant=True)


class KeepsFiles(Protocol[_ConfigT, _ChannelT]):
    """A channel class built from its validated config and the directory for its state and media."""

    def __call__(self, config: _ConfigT, /, *, data_dir: Path) -> _ChannelT: ...


def channel_factory(
    channel_class: KeepsFiles[_ConfigT, _ChannelT],
) -> Callable[[_ConfigT, ChannelContext], _ChannelT]:
    """The `create` of a platform package whose channel needs nothing of the context but the
    profile's data directory: `create = channel_factory(XChannel)`."""

    def create(config: _ConfigT, context: ChannelContext) -> _ChannelT:
        return channel_class(config, data_dir=context.data_dir)

    return create
