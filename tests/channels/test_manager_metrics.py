"""The channel layer's metrics: one set of families per registry, a label per profile."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from channels.metrics import ChannelMetrics


def test_profiles_share_a_registry_with_their_own_labels() -> None:
    registry = CollectorRegistry()
    work, home = ChannelMetrics(registry, "work"), ChannelMetrics(registry, "home")

    work.message_sent("telegram")
    work.message_sent("telegram")
    home.message_sent("telegram")
    home.send_failed("discord", "rate_limited")
    work.send_retried("telegram", "transient")
    work.set_channel_up("telegram", True)
    home.set_channel_up("discord", False)
    work.stream_edited("telegram")
    work.channel_restarted("telegram")

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("octos_messages_out_total", profile="work", channel="telegram") == 2
    assert value("octos_messages_out_total", profile="home", channel="telegram") == 1
    assert (
        value("octos_send_errors_total", profile="home", channel="discord", reason="rate_limited")
        == 1
    )
    assert (
        value("octos_send_retries_total", profile="work", channel="telegram", reason="transient")
        == 1
    )
    assert value("octos_channel_up", profile="work", channel="telegram") == 1
    assert value("octos_channel_up", profile="home", channel="discord") == 0
    assert value("octos_stream_edits_total", profile="work", channel="telegram") == 1
    assert value("octos_channel_restarts_total", profile="work", channel="telegram") == 1
    assert b"# HELP octos_messages_out_total" in generate_latest(registry)


def test_separate_registries_do_not_share_values() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    ChannelMetrics(first, "p").message_sent("api")

    ChannelMetrics(second, "p")

    assert (
        first.get_sample_value("octos_messages_out_total", {"profile": "p", "channel": "api"}) == 1
    )
    assert (
        second.get_sample_value("octos_messages_out_total", {"profile": "p", "channel": "api"})
        is None
    )


def test_private_metrics_need_no_registry() -> None:
    metrics = ChannelMetrics.private("solo")

    metrics.message_sent("cli")

    assert (
        metrics.registry.get_sample_value(
            "octos_messages_out_total", {"profile": "solo", "channel": "cli"}
        )
        == 1
    )
