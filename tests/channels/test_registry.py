"""The registry: channel types imported lazily, plugins, clear errors for what is missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from channels import registry
from channels.registry import ChannelContext, ChannelUnavailable, build_channel
from tests.channels.registry_plugins import EchoPluginChannel, FakeConfig

CONTEXT = ChannelContext(profile="work", data_dir=Path("/nonexistent/data/work"))
PLUGIN = "tests.channels.registry_plugins:EchoPluginChannel"


def test_builds_a_plugin_with_config_and_context() -> None:
    config = FakeConfig("plugin", allow=["alice", 42], class_path=PLUGIN, options={"name": "hub"})

    channel = build_channel(config, CONTEXT)

    assert isinstance(channel, EchoPluginChannel)
    assert channel.name == "hub"
    assert channel.config is config
    assert channel.context == CONTEXT
    assert channel.is_allowed("alice")
    assert channel.is_allowed("42|someone")
    assert not channel.is_allowed("mallory")


def test_plugin_class_path_may_sit_in_options() -> None:
    config = FakeConfig("plugin", allow=["*"], options={"class_path": PLUGIN})

    channel = build_channel(config, CONTEXT)

    assert isinstance(channel, EchoPluginChannel)
    assert channel.is_allowed("anyone")


def test_an_empty_allow_list_allows_nobody() -> None:
    channel = build_channel(FakeConfig("plugin", class_path=PLUGIN), CONTEXT)

    assert channel.allow.is_empty
    assert not channel.is_allowed("alice")


def test_a_type_is_built_by_its_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        registry, "CHANNEL_TYPES", {"cli": "tests.channels.registry_plugins:create"}
    )

    channel = build_channel(FakeConfig("cli", allow=["*"]), CONTEXT)

    assert isinstance(channel, EchoPluginChannel)


def test_a_missing_sdk_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        registry, "CHANNEL_TYPES", {"telegram": "tests.channels.registry_needs_sdk:create"}
    )
    monkeypatch.setitem(sys.modules, "telegram", None)
    monkeypatch.delitem(sys.modules, "tests.channels.registry_needs_sdk", raising=False)

    with pytest.raises(ChannelUnavailable) as caught:
        build_channel(FakeConfig("telegram"), CONTEXT)

    message = str(caught.value)
    assert "channel type 'telegram' needs the optional dependency python-telegram-bot" in message
    assert "pip install 'octos-gateway[telegram]'" in message


def test_a_missing_channel_module_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "CHANNEL_TYPES", {"slack": "channels.no_such_module:create"})

    with pytest.raises(ChannelUnavailable, match="'slack' is not available"):
        build_channel(FakeConfig("slack"), CONTEXT)


def test_an_unknown_type_lists_the_known_ones() -> None:
    with pytest.raises(ChannelUnavailable) as caught:
        build_channel(FakeConfig("telegarm"), CONTEXT)

    assert "unknown channel type 'telegarm'" in str(caught.value)
    assert "telegram" in caught.value.suggestion


@pytest.mark.parametrize(
    ("class_path", "expected"),
    [
        (None, "needs class_path"),
        ("tests.channels.no_such_plugin:Channel", "cannot be imported"),
        ("tests.channels.registry_plugins:Missing", "has no Missing"),
        ("tests.channels.registry_plugins:NotAChannel", "not a Channel"),
    ],
)
def test_plugin_errors_are_clear(class_path: str | None, expected: str) -> None:
    with pytest.raises(ChannelUnavailable, match=expected):
        build_channel(FakeConfig("plugin", class_path=class_path), CONTEXT)


def test_every_registered_type_names_a_factory() -> None:
    assert set(registry.CHANNEL_TYPES) == {
        "telegram",
        "discord",
        "slack",
        "api",
        "cli",
        "twilio",
        "whatsapp",
        "line",
        "matrix",
        "email",
        "feishu",
        "wecom",
        "wecom-bot",
        "qq-bot",
    }
    for target in registry.CHANNEL_TYPES.values():
        module, _, factory = target.partition(":")
        assert module.startswith("channels.")
        assert factory == "create"


def test_platform_sdks_are_imported_only_when_used() -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from channels.registry import ChannelContext, build_channel
        from channels.outbound.manager import ChannelManager
        from bus import create_bus
        from tests.channels.registry_plugins import FakeConfig

        _, publisher = create_bus()
        manager = ChannelManager("work", publisher)
        config = FakeConfig("plugin", allow=["*"], class_path={PLUGIN!r})
        manager.register(build_channel(config, ChannelContext("work", Path("data"))))
        sdks = [
            "discord",
            "telegram",
            "slack_bolt",
            "slack_sdk",
            "twilio",
            "linebot",
            "nio",
            "imap_tools",
            "aiosmtplib",
            "google.protobuf",
            "channels.feishu",
            "channels.wecom",
            "cryptography",
        ]
        print(",".join(name for name in sdks if name in sys.modules))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
