"""`Channel.send_embed` by default: the card as Markdown, in one message."""

from __future__ import annotations

from channels.base import Embed, EmbedField
from tests.channels.recording import RecordingChannel


async def test_a_channel_without_embeds_sends_the_card_as_markdown() -> None:
    channel = RecordingChannel()
    embed = Embed(
        "Status",
        "All systems go",
        fields=(EmbedField("Uptime", "3 days"), EmbedField("Queue", "empty", inline=False)),
    )

    await channel.send_embed("c1", embed)

    [call] = channel.of("send_with_id")
    assert call.chat_id == "c1"
    assert call.content == "**Status**\nAll systems go\n**Uptime:** 3 days\n**Queue:** empty"
