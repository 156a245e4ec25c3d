"""What Feishu sends a bot: `im.message.receive_v1`, `im.message.recalled_v1`,
`im.message.reaction.created_v1` and `card.action.trigger` events, and webhook requests
carrying them (encrypted with the Encrypt Key, signed), including forgeries a webhook must
refuse."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import Any

import aiohttp

from channels.feishu.webhook import FeishuCipher, signature

#: The Encrypt Key of Feishu's documentation example ("test key" decrypts
#: P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk= to "hello world").
DOC_ENCRYPT_KEY = "test key"
JsonObject = dict[str, Any]


class FeishuEventSender:
    """Builds events for an app; the fake server mixes it in."""

    app_id: str
    bot_open_id: str
    encrypt_key: str
    verification_token: str
    #: Users' messages the events built so far carry, by message id: what Feishu shows of
    #: them (`chat_id`, `sender`) to a bot that asks.
    user_messages: dict[str, JsonObject]
    _ids: itertools.count[int]

    def message_event(
        self,
        sender_open_id: str,
        chat_id: str,
        text: str,
        *,
        chat_type: str = "p2p",
        mention_bot: bool = False,
        event_id: str | None = None,
    ) -> JsonObject:
        mentions = []
        if mention_bot:
            text = f"@_user_1 {text}"
            mentions.append(
                {"key": "@_user_1", "id": {"open_id": self.bot_open_id}, "name": "Fake Bot"}
            )
        number = next(self._ids)
        message_id = f"om_in{number:017d}"
        self.user_messages[message_id] = {
            "chat_id": chat_id,
            "sender": {"id": sender_open_id, "id_type": "open_id", "sender_type": "user"},
        }
        return {
            "schema": "2.0",
            "header": {
                "event_id": event_id or uuid.uuid4().hex,
                "event_type": "im.message.receive_v1",
                "create_time": str(int(time.time() * 1000)),
                "token": self.verification_token,
                "app_id": self.app_id,
                "tenant_key": "tenant-fake",
            },
            "event": {
                "sender": {"sender_id": {"open_id": sender_open_id}, "sender_type": "user"},
                "message": {
                    "message_id": message_id,
                    "chat_id": chat_id,
                    "chat_type": chat_type,
                    "message_type": "text",
                    "content": json.dumps({"text": text}, ensure_ascii=False),
                    "mentions": mentions,
                },
            },
        }

    def recall_event(self, sent: JsonObject) -> JsonObject:
        """The message of the received-message event `sent` is taken back by its sender
        (`im.message.recalled_v1`, which names no sender)."""
        message = sent["event"]["message"]
        return {
            "schema": "2.0",
            "header": {
                **sent["header"],
                "event_id": uuid.uuid4().hex,
                "event_type": "im.message.recalled_v1",
            },
            "event": {
                "message_id": message["message_id"],
                "chat_id": message["chat_id"],
                "recall_time": str(int(time.time() * 1000)),
                "recall_type": "message_owner",
            },
        }

    def reaction_event(
        self,
        operator_open_id: str,
        message_id: str,
        emoji_type: str,
        *,
        operator_type: str = "user",
    ) -> JsonObject:
        """Someone adds the reaction `emoji_type` ("THUMBSUP") to the message `message_id`
        (`im.message.reaction.created_v1`: it names neither the chat nor the message's
        author). An app's reaction carries its `app_id` instead of a `user_id`."""
        operator: JsonObject = (
            {
                "user_id": {
                    "union_id": f"on_{operator_open_id.removeprefix('ou_')}",
                    "user_id": operator_open_id.removeprefix("ou_")[:8],
                    "open_id": operator_open_id,
                }
            }
            if operator_type == "user"
            else {"app_id": self.app_id}
        )
        return {
            "schema": "2.0",
            "header": {
                "event_id": uuid.uuid4().hex,
                "event_type": "im.message.reaction.created_v1",
                "create_time": str(int(time.time() * 1000)),
                "token": self.verification_token,
                "app_id": self.app_id,
                "tenant_key": "tenant-fake",
            },
            "event": {
                "message_id": message_id,
                "reaction_type": {"emoji_type": emoji_type},
                "operator_type": operator_type,
                **operator,
                "action_time": str(int(time.time() * 1000)),
            },
        }

    def card_action_event(
        self, operator_open_id: str, chat_id: str, message_id: str, value: JsonObject
    ) -> JsonObject:
        """A user taps a card button whose `value` was `value` (`card.action.trigger`)."""
        return {
            "schema": "2.0",
            "header": {
                "event_id": uuid.uuid4().hex,
                "event_type": "card.action.trigger",
                "create_time": str(int(time.time() * 1000)),
                "token": self.verification_token,
                "app_id": self.app_id,
                "tenant_key": "tenant-fake",
            },
            "event": {
                "operator": {"open_id": operator_open_id, "tenant_key": "tenant-fake"},
                "token": uuid.uuid4().hex,
                "action": {"value": value, "tag": "button"},
                "host": "im_message",
                "context": {"open_message_id": message_id, "open_chat_id": chat_id},
            },
        }

    def resource_event(
        self, sender_open_id: str, chat_id: str, message_type: str, content: JsonObject
    ) -> JsonObject:
        """An image, file, audio or media message with `content` (`{"image_key"}`, `{"file_key",
        "file_name", "duration"}`), as Feishu sends one: no text, no mentions."""
        event = self.message_event(sender_open_id, chat_id, "")
        message = event["event"]["message"]
        message["message_type"] = message_type
        message["content"] = json.dumps(content, ensure_ascii=False)
        return event

    def sealed(
        self,
        payload: JsonObject,
        *,
        timestamp: int | None = None,
        encrypt_key: str | None = None,
        signed: bool = True,
    ) -> tuple[dict[str, str], bytes]:
        """Headers and body of a webhook request carrying `payload`, as Feishu sends it."""
        key = self.encrypt_key if encrypt_key is None else encrypt_key
        body = json.dumps({"encrypt": FeishuCipher(key).encrypt(json.dumps(payload).encode())})
        raw = body.encode()
        headers = {"Content-Type": "application/json"}
        if signed:
            stamp, nonce = (
                str(int(time.time()) if timestamp is None else timestamp),
                uuid.uuid4().hex,
            )
            headers |= {
                "X-Lark-Request-Timestamp": stamp,
                "X-Lark-Request-Nonce": nonce,
                "X-Lark-Signature": signature(stamp, nonce, key, raw),
            }
        return headers, raw

    def forgeries(self, payload: JsonObject) -> dict[str, tuple[dict[str, str], bytes]]:
        """Requests a webhook must refuse (401), by name: for a shared webhook attack corpus."""
        headers, body = self.sealed(payload)
        header = payload.get("header") or {}
        return {
            "forged_signature": ({**headers, "X-Lark-Signature": "0" * 64}, body),
            "tampered_body": (headers, body.replace(b'"}', b'x"}')),
            "stale": self.sealed(payload, timestamp=int(time.time()) - 3600),
            "unsigned": self.sealed(payload, signed=False),
            "wrong_encrypt_key": self.sealed(payload, encrypt_key="not the key"),
            "wrong_verification_token": self.sealed(
                payload | {"header": {**header, "token": "guess"}}
            ),
            "unencrypted": ({"Content-Type": "application/json"}, json.dumps(payload).encode()),
        }

    async def post(self, url: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=headers) as r:
            return r.status, await r.text()

    async def post_event(self, url: str, payload: JsonObject) -> tuple[int, str]:
        headers, body = self.sealed(payload)
        return await self.post(url, headers, body)

    def url_verification(self, token: str | None = None) -> JsonObject:
        return {
            "challenge": "ajls384kdjx98XX",
            "token": self.verification_token if token is None else token,
            "type": "url_verification",
        }
