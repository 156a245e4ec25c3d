"""Partitions are a stable hash of the chat's base key; subject tokens carry nothing of a user's."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bus import KNOWN_CHANNELS, InboundMessage, OutboundMessage
from gateway.cluster.streams import ClusterNames, channel_token, chat_base_key, partition_of

NAMES = ClusterNames("OCTOS", 16)


def test_a_partition_is_the_same_in_every_process() -> None:
    # Fixed values: a change of hash would move live chats to other partitions.
    assert partition_of("main:telegram:42", 16) == partition_of("main:telegram:42", 16)
    assert [partition_of(f"main:telegram:{n}", 16) for n in range(6)] == [
        partition_of(chat_base_key("main", "telegram", str(n)), 16) for n in range(6)
    ]
    assert partition_of("main:telegram:42", 16) == 2


def test_topics_of_one_chat_share_its_partition() -> None:
    message = InboundMessage(channel="telegram", sender_id="1", chat_id="42", content="hi")
    assert NAMES.partition_of_chat("main", message) == partition_of("main:telegram:42", 16)


def test_a_reply_is_in_its_chats_partition() -> None:
    message = InboundMessage(channel="telegram", sender_id="1", chat_id="42", content="hi")
    reply = OutboundMessage(channel="telegram", chat_id="42", content="hello")
    assert NAMES.partition_of_chat("main", reply) == NAMES.partition_of_chat("main", message)


@given(st.text(), st.text(), st.integers(min_value=1, max_value=1024))
def test_any_chat_id_gives_a_partition_in_range_and_a_safe_subject(
    profile: str, chat_id: str, partitions: int
) -> None:
    names = ClusterNames("OCTOS", partitions)
    message = InboundMessage(channel="telegram", sender_id="1", chat_id=chat_id, content="")
    partition = names.partition_of_chat(profile, message)
    assert 0 <= partition < partitions
    tokens = names.inbound_subject(partition).split(".")
    assert tokens == ["OCTOS", "in", str(partition)]
    assert names.partition_of_subject(names.outbound_subject("telegram", partition)) == partition


def test_chats_spread_over_the_partitions() -> None:
    counts = [0] * 16
    for chat in range(1600):
        counts[partition_of(chat_base_key("main", "telegram", str(chat)), 16)] += 1
    assert min(counts) > 50  # 100 expected each


def test_every_name_is_the_one_streams_and_consumers_already_have() -> None:
    # Fixed values: streams and durable consumers outlive the process, so a changed name
    # would leave a running cluster's messages where no process reads them.
    names = ClusterNames("OCTOS", 4)
    assert (names.inbound_stream, names.outbound_stream, names.dead_stream) == (
        "OCTOS_IN",
        "OCTOS_OUT",
        "OCTOS_DEAD",
    )
    assert (names.status_subject, names.cancel_subject, names.inbound_subjects) == (
        "OCTOS.status",
        "OCTOS.cancel",
        "OCTOS.in.*",
    )
    assert [
        names.inbound_subject(3),
        names.outbound_subject("telegram", 3),
        names.shared_outbound_subject(3),
        names.dead_subject(3),
        names.reply_subject("in-a"),
        names.live_subject("in-a"),
    ] == [
        "OCTOS.in.3",
        "OCTOS.out.telegram.3",
        "OCTOS.out.3",
        "OCTOS.dead.3",
        "OCTOS.reply.in-a",
        "OCTOS.live.in-a",
    ]
    assert [
        names.worker_consumer(3),
        names.delivery_consumer("wecom-bot", 3),
        names.shared_delivery_consumer(3),
        names.reply_consumer("in-a"),
    ] == ["worker-3", "delivery-wecom-bot-3", "delivery-3", "reply-in-a"]


@given(st.text())
def test_any_channel_name_gives_a_safe_subject_token(channel: str) -> None:
    token = channel_token(channel)
    assert token
    assert not set(token) & set(".*> \t\r\n")
    assert NAMES.outbound_subject(channel, 1).split(".") == ["OCTOS", "out", token, "1"]
    if channel in KNOWN_CHANNELS:
        assert token == channel
