"""Fields that mean the same on every platform model, each worded for its platform.

Every platform has an allow list, and every platform that receives webhooks a path on the
gateway's HTTP server: what such a field is (its default, its sentence in the generated
reference) is written once here, and each platform model fills in the words that are its own
(whose ids, what arrives at the path).
"""

from __future__ import annotations

from pydantic import Field

from config.common import AllowEntry


def allow_list_field(whose: str, *, verb: str = "talk to") -> list[AllowEntry]:
    """`allow`: the senders the bot answers, empty (nobody) unless configured."""
    return Field(
        default_factory=list,
        description=f'{whose} allowed to {verb} the bot; "*" allows everyone, an empty list '
        "nobody.",
    )


def webhook_path_field(default: str, receives: str) -> str:
    """`webhook_path`: where the platform's requests arrive on the gateway's HTTP server."""
    return Field(
        default, description=f"Path on the gateway's HTTP server that receives {receives}."
    )
