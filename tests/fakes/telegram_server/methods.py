"""The Bot API methods the fake answers (all but getUpdates, which the server long-polls).

Each takes the decoded parameters and uploaded files and returns the `result`, or raises
`ApiError` with the description Telegram uses for that failure.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from tests.fakes.telegram_server.state import (
    CAPTION_LIMIT,
    TEXT_LIMIT,
    ApiError,
    BotState,
    StoredFile,
    UploadedFile,
    chat_id_of,
    checked_text,
)

Params = dict[str, Any]
Files = dict[str, UploadedFile]
Method = Callable[[Params, Files], Any]

NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    }
)


class BotApiMethods:
    def __init__(self, state: BotState) -> None:
        self._state = state

    def lookup(self, method: str) -> Method | None:
        """The handler of a method; Bot API method names are case-insensitive."""
        handler: Method | None = getattr(self, f"api_{method.lower()}", None)
        return handler

    def api_getme(self, params: Params, files: Files) -> Any:
        return self._state.bot_user

    def api_sendmessage(self, params: Params, files: Files) -> Any:
        chat_id = chat_id_of(params)
        visible, entities = checked_text(params.get("text"), params.get("parse_mode"), TEXT_LIMIT)
        return self._state.bot_message(chat_id, params, {"text": visible}, entities, "entities")

    def api_editmessagetext(self, params: Params, files: Files) -> Any:
        message = self._state.message(params, "message to edit not found")
        if message["from"]["id"] != self._state.bot_user["id"]:
            raise ApiError(400, "Bad Request: message can't be edited")
        visible, entities = checked_text(params.get("text"), params.get("parse_mode"), TEXT_LIMIT)
        if message.get("text") == visible and message.get("entities", []) == entities:
            raise ApiError(400, NOT_MODIFIED)
        message["text"] = visible
        message.pop("entities", None)
        if entities:
            message["entities"] = entities
        message["edit_date"] = int(time.time())
        return message

    def api_deletemessage(self, params: Params, files: Files) -> Any:
        message = self._state.message(params, "message to delete not found")
        del self._state.messages[(message["chat"]["id"], message["message_id"])]
        return True

    def api_sendchataction(self, params: Params, files: Files) -> Any:
        chat_id_of(params)
        if params.get("action") not in CHAT_ACTIONS:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    def api_setmycommands(self, params: Params, files: Files) -> Any:
        commands = params.get("commands")
        if not isinstance(commands, list) or not all(
            isinstance(c, dict) and re.fullmatch(r"[a-z0-9_]{1,32}", str(c.get("command", "")))
            for c in commands
        ):
            raise ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
        self._state.commands = commands
        return True

    def api_getmycommands(self, params: Params, files: Files) -> Any:
        return self._state.commands

    def api_deletemycommands(self, params: Params, files: Files) -> Any:
        self._state.commands = []
        return True

    def api_setwebhook(self, params: Params, files: Files) -> Any:
        url = params.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ApiError(400, "Bad Request: bad webhook: invalid URL")
        self._state.webhook = {
            "url": url,
            "secret_token": params.get("secret_token"),
            "allowed_updates": params.get("allowed_updates"),
        }
        return True

    def api_deletewebhook(self, params: Params, files: Files) -> Any:
        self._state.webhook = None
        if params.get("drop_pending_updates") is True:
            self._state.pending = []
        return True

    def api_getwebhookinfo(self, params: Params, files: Files) -> Any:
        webhook = self._state.webhook
        return {
            "url": webhook["url"] if webhook else "",
            "has_custom_certificate": False,
            "pending_update_count": len(self._state.pending),
        }

    def api_setmessagereaction(self, params: Params, files: Files) -> Any:
        message = self._state.message(params, "message to react not found")
        key = (message["chat"]["id"], message["message_id"])
        self._state.reactions[key] = list(params.get("reaction") or [])
        return True

    def api_editmessagereplymarkup(self, params: Params, files: Files) -> Any:
        """The inline keyboard of a bot message set, or taken off when none is given."""
        message = self._state.message(params, "message to edit not found")
        if message["from"]["id"] != self._state.bot_user["id"]:
            raise ApiError(400, "Bad Request: message can't be edited")
        markup = params.get("reply_markup")
        if markup is not None and not _valid_keyboard(markup):
            raise ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
        if message.get("reply_markup") == markup or (
            markup is None and "reply_markup" not in message
        ):
            raise ApiError(400, NOT_MODIFIED)
        if markup is None:
            message.pop("reply_markup", None)
        else:
            message["reply_markup"] = markup
        message["edit_date"] = int(time.time())
        return message

    def api_answercallbackquery(self, params: Params, files: Files) -> Any:
        """Telegram takes one answer per query; a second, or an unknown id, is refused."""
        query_id = str(params.get("callback_query_id", ""))
        answered = self._state.callback_queries.get(query_id)
        if answered is None or answered > 0:
            raise ApiError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        self._state.callback_queries[query_id] = 1
        return True

    def api_sendphoto(self, params: Params, files: Files) -> Any:
        stored = self._received_file(params, files, "photo", "photos", ".jpg")
        sizes = [{**stored.as_file(), "width": 800, "height": 600}]
        return self._media_message(params, {"photo": sizes})

    def api_senddocument(self, params: Params, files: Files) -> Any:
        stored = self._received_file(params, files, "document", "documents", "")
        return self._media_message(params, {"document": stored.as_file()})

    def api_sendvoice(self, params: Params, files: Files) -> Any:
        # The Bot API: "audio must be in an .OGG file encoded with OPUS" (or MP3, M4A).
        stored = self._received_file(params, files, "voice", "voice", ".oga")
        return self._media_message(params, {"voice": {**stored.as_file(), "duration": 1}})

    def api_sendaudio(self, params: Params, files: Files) -> Any:
        stored = self._received_file(params, files, "audio", "music", ".mp3")
        return self._media_message(params, {"audio": {**stored.as_file(), "duration": 1}})

    def api_sendvideo(self, params: Params, files: Files) -> Any:
        stored = self._received_file(params, files, "video", "videos", ".mp4")
        video = {**stored.as_file(), "width": 640, "height": 480, "duration": 1}
        return self._media_message(params, {"video": video})

    def api_getfile(self, params: Params, files: Files) -> Any:
        file_id = str(params.get("file_id", ""))
        stored = self._state.files.get(file_id.removesuffix("-small"))
        if stored is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        return {**stored.as_file(), "file_id": file_id, "file_path": stored.file_path}

    def _received_file(
        self, params: Params, files: Files, key: str, folder: str, suffix: str
    ) -> StoredFile:
        upload = files.get(key)
        if upload is not None:
            stored = self._state.add_file(
                upload.data, folder, suffix=suffix, file_name=upload.filename
            )
            if key == "document":
                stored.extra = {"file_name": upload.filename}
            return stored
        existing = self._state.files.get(str(params.get(key, "")))
        if existing is None:
            raise ApiError(400, f"Bad Request: there is no {key} in the request")
        return existing

    def _media_message(self, params: Params, media: dict[str, Any]) -> Any:
        chat_id = chat_id_of(params)
        fields = dict(media)
        entities: list[dict[str, Any]] = []
        if params.get("caption"):
            visible, entities = checked_text(
                params["caption"], params.get("parse_mode"), CAPTION_LIMIT, caption=True
            )
            fields["caption"] = visible
        return self._state.bot_message(chat_id, params, fields, entities, "caption_entities")


def _valid_keyboard(markup: object) -> bool:
    """An `InlineKeyboardMarkup`: rows of buttons, each with a text and exactly one action,
    `callback_data` of 1-64 bytes."""
    if not isinstance(markup, dict) or not isinstance(markup.get("inline_keyboard"), list):
        return False
    for row in markup["inline_keyboard"]:
        if not isinstance(row, list):
            return False
        for button in row:
            if not isinstance(button, dict) or not button.get("text"):
                return False
            actions = [key for key in ("callback_data", "url") if key in button]
            if len(actions) != 1:
                return False
            data = button.get("callback_data")
            if data is not None and not 1 <= len(str(data).encode()) <= 64:
                return False
    return True
