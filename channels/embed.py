"""An embed: a titled card with named fields, what `Channel.send_embed` sends."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Embed:
    title: str
    description: str
    fields: tuple[EmbedField, ...] = ()
    #: The card's accent colour, 0xRRGGBB; None leaves the platform's own.
    color: int | None = None

    def markdown(self) -> str:
        """The card as plain Markdown, for a platform without embeds."""
        lines = [f"**{self.title}**", self.description]
        lines.extend(f"**{field.name}:** {field.value}" for field in self.fields)
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class EmbedField:
    name: str
    value: str
    #: Laid out beside its neighbours, where the platform puts fields in columns (discord.py's
    #: default too).
    inline: bool = True
