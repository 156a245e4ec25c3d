"""A fake WeCom (企业微信) on 127.0.0.1: the server API the application channel calls, and the
callbacks WeCom makes to the application's URL.

    async with FakeWeCom() as fake:
        config = WeComConfig(corp_id=fake.corp_id, agent_id=fake.agent_id, secret=fake.secret,
                             token=fake.token, encoding_aes_key=fake.encoding_aes_key,
                             api_base_url=fake.base_url, ...)
        status = await fake.post_message(callback_url, fake.text_message("alice", "hi"))
        await fake.wait_until(lambda: fake.texts("alice"))

Server API (`{base_url}/cgi-bin/...`, answers HTTP 200 with `{"errcode", "errmsg", ...}` as WeCom
does): `GET gettoken?corpid&corpsecret` (40013 unknown corp, 40001 wrong secret) and
`POST message/send?access_token` (42001 expired or unknown token; 45009 on `rate_limit_next`;
45002 when the content is over 2,048 UTF-8 bytes; 81013 for an unknown user), and
`GET media/get?access_token&media_id`: a file given with `add_media`, its bytes with its
Content-Type and Content-disposition, or, as WeCom answers, JSON 40007 for an unknown one.
`POST media/upload?access_token&type` (multipart `media`) keeps the file in `uploads` by the
`media_id` it answers with, within WeCom's limits (over 5 bytes; image 10 MB, voice 2 MB, video
10 MB, file 20 MB; else 40009); `message/send` takes `image`, `voice`, `video` and `file`
messages naming an uploaded `media_id` of their type (else 40007).

Callbacks are encrypted and signed the way WeCom does (`channels.wecom.crypto` is the same
documented algorithm); the defaults are the keys of WeCom's documentation example.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from channels.wecom.crypto import WeComCrypto
from tests.fakes import ServedFake

#: WeCom's documentation example (developer.work.weixin.qq.com, 加解密方案说明).
DOC_CORP_ID = "wx5823bf96d3bd56c7"
DOC_TOKEN = "QDG6eK"
DOC_ENCODING_AES_KEY = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
MAX_CONTENT_BYTES = 2048
MB = 1024 * 1024
MAX_UPLOAD_BYTES = {"image": 10 * MB, "voice": 2 * MB, "video": 10 * MB, "file": 20 * MB}


@dataclass(frozen=True, slots=True)
class Upload:
    data: bytes
    name: str
    media_type: str


@dataclass(frozen=True, slots=True)
class SentMessage:
    touser: str
    msgtype: str
    content: str
    agentid: object
    errcode: int
    at: float
    #: The uploaded file a media message names.
    media_id: str = ""


class FakeWeCom(ServedFake):
    def __init__(
        self,
        *,
        corp_id: str = DOC_CORP_ID,
        token: str = DOC_TOKEN,
        encoding_aes_key: str = DOC_ENCODING_AES_KEY,
        agent_id: int = 1000002,
        secret: str = "fake-wecom-app-secret",
        users: tuple[str, ...] = ("alice", "mallory", "bob"),
    ) -> None:
        self.corp_id = corp_id
        self.token = token
        self.encoding_aes_key = encoding_aes_key
        self.agent_id = agent_id
        self.secret = secret
        self.users = set(users)
        self.crypto = WeComCrypto(token, encoding_aes_key, corp_id)
        self.sent: list[SentMessage] = []
        self.token_calls = 0
        self._tokens: set[str] = set()
        self._rate_limits = 0
        self._msg_ids = itertools.count(4561255354251345929)
        self._changed = asyncio.Event()
        self.media: dict[str, tuple[bytes, str]] = {}
        self.media_requests: list[str] = []
        self.uploads: dict[str, Upload] = {}
        app = web.Application(client_max_size=MAX_UPLOAD_BYTES["file"] + MB)
        app.router.add_get("/cgi-bin/gettoken", self._gettoken)
        app.router.add_post("/cgi-bin/message/send", self._send)
        app.router.add_get("/cgi-bin/media/get", self._media_get)
        app.router.add_post("/cgi-bin/media/upload", self._media_upload)
        ServedFake.__init__(self, app)

    @property
    def base_url(self) -> str:
        return self.origin

    # The server API

    def _answer(self, body: dict[str, Any]) -> web.Response:
        self._changed.set()
        return web.json_response(body)

    async def _gettoken(self, request: web.Request) -> web.Response:
        self.token_calls += 1
        if request.query.get("corpid") != self.corp_id:
            return self._answer({"errcode": 40013, "errmsg": "invalid corpid"})
        if request.query.get("corpsecret") != self.secret:
            return self._answer({"errcode": 40001, "errmsg": "invalid credential"})
        token = hashlib.sha256(f"{self.token_calls}:{time.time()}".encode()).hexdigest()
        self._tokens.add(token)
        return self._answer(
            {"errcode": 0, "errmsg": "ok", "access_token": token, "expires_in": 7200}
        )

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.json()
        msgtype = str(body.get("msgtype", ""))
        content = str((body.get(msgtype) or {}).get("content", ""))
        media_id = str((body.get(msgtype) or {}).get("media_id", ""))
        errcode, errmsg = self._judge(request.query.get("access_token", ""), body, content)
        self.sent.append(
            SentMessage(
                str(body.get("touser", "")),
                msgtype,
                content,
                body.get("agentid"),
                errcode,
                time.monotonic(),
                media_id,
            )
        )
        answer: dict[str, Any] = {"errcode": errcode, "errmsg": errmsg}
        if errcode == 0:
            answer |= {"invaliduser": "", "msgid": f"msg{next(self._msg_ids)}"}
        return self._answer(answer)

    def _judge(self, token: str, body: dict[str, Any], content: str) -> tuple[int, str]:
        if token not in self._tokens:
            return 42001, "access_token expired"
        if self._rate_limits:
            self._rate_limits -= 1
            return 45009, "api freq out of limit"
        if body.get("agentid") != self.agent_id:
            return 40056, "invalid agentid"
        msgtype = body.get("msgtype")
        if msgtype in MAX_UPLOAD_BYTES:
            upload = self.uploads.get(str((body.get(msgtype) or {}).get("media_id", "")))
            if upload is None or upload.media_type != msgtype:
                return 40007, "invalid media_id"
        elif msgtype not in ("text", "markdown"):
            return 40008, "invalid message type"
        if len(content.encode("utf-8")) > MAX_CONTENT_BYTES:
            return 45002, "content size out of limit"
        if body.get("touser") not in self.users:
            return 81013, "user & party & tag all invalid"
        return 0, "ok"

    def add_media(self, media_id: str, data: bytes, content_type: str) -> None:
        self.media[media_id] = (data, content_type)

    async def _media_get(self, request: web.Request) -> web.Response:
        if request.query.get("access_token", "") not in self._tokens:
            return self._answer({"errcode": 42001, "errmsg": "access_token expired"})
        media_id = request.query.get("media_id", "")
        self.media_requests.append(media_id)
        found = self.media.get(media_id)
        if found is None:
            return self._answer({"errcode": 40007, "errmsg": "invalid media_id"})
        data, content_type = found
        self._changed.set()
        disposition = f'attachment; filename="{media_id}"'
        return web.Response(
            body=data, content_type=content_type, headers={"Content-disposition": disposition}
        )

    async def _media_upload(self, request: web.Request) -> web.Response:
        if request.query.get("access_token", "") not in self._tokens:
            return self._answer({"errcode": 42001, "errmsg": "access_token expired"})
        media_type = request.query.get("type", "")
        form = await request.post()
        media = form.get("media")
        if media_type not in MAX_UPLOAD_BYTES or not isinstance(media, web.FileField):
            return self._answer({"errcode": 40004, "errmsg": "invalid media type"})
        data = media.file.read()
        if not 5 < len(data) <= MAX_UPLOAD_BYTES[media_type]:
            return self._answer({"errcode": 40009, "errmsg": "invalid media size"})
        media_id = f"3{next(self._msg_ids)}"
        self.uploads[media_id] = Upload(data, media.filename, media_type)
        return self._answer({"errcode": 0, "errmsg": "", "type": media_type, "media_id": media_id})

    def rate_limit_next(self, count: int = 1) -> None:
        self._rate_limits += count

    def expire_tokens(self) -> None:
        """Every token handed out so far stops working (WeCom answers 42001)."""
        self._tokens.clear()

    def delivered(self, user: str) -> list[SentMessage]:
        return [m for m in self.sent if m.touser == user and m.errcode == 0]

    def texts(self, user: str) -> list[str]:
        return [m.content for m in self.delivered(user)]

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    # Callbacks to the application

    def text_message(self, sender: str, text: str, *, msg_id: int | None = None) -> bytes:
        """The decrypted XML of a user's text message, as WeCom writes it."""
        number = next(self._msg_ids) if msg_id is None else msg_id
        return (
            f"<xml><ToUserName><![CDATA[{self.corp_id}]]></ToUserName>"
            f"<FromUserName><![CDATA[{sender}]]></FromUserName>"
            f"<CreateTime>{int(time.time())}</CreateTime>"
            "<MsgType><![CDATA[text]]></MsgType>"
            f"<Content><![CDATA[{text}]]></Content>"
            f"<MsgId>{number}</MsgId><AgentID>{self.agent_id}</AgentID></xml>"
        ).encode()

    def media_message(
        self, sender: str, msg_type: str, media_id: str, *, voice_format: str = "amr"
    ) -> bytes:
        """The decrypted XML of an image (with `PicUrl`), voice (with `Format`) or video (with
        `ThumbMediaId`) message, as WeCom writes it."""
        extra = {
            "image": f"<PicUrl><![CDATA[{self.origin}/pic/{media_id}]]></PicUrl>",
            "voice": f"<Format><![CDATA[{voice_format}]]></Format>",
            "video": f"<ThumbMediaId><![CDATA[thumb_{media_id}]]></ThumbMediaId>",
        }[msg_type]
        return (
            f"<xml><ToUserName><![CDATA[{self.corp_id}]]></ToUserName>"
            f"<FromUserName><![CDATA[{sender}]]></FromUserName>"
            f"<CreateTime>{int(time.time())}</CreateTime>"
            f"<MsgType><![CDATA[{msg_type}]]></MsgType>{extra}"
            f"<MediaId><![CDATA[{media_id}]]></MediaId>"
            f"<MsgId>{next(self._msg_ids)}</MsgId><AgentID>{self.agent_id}</AgentID></xml>"
        ).encode()

    def sealed(
        self, plain: bytes, *, timestamp: int | None = None, crypto: WeComCrypto | None = None
    ) -> tuple[dict[str, str], bytes]:
        """Query parameters and body of a callback carrying `plain`, signed and encrypted."""
        crypto = crypto or self.crypto
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        nonce = str(next(self._msg_ids) % 1_000_000_000)
        encrypted = crypto.encrypt(plain)
        query = {
            "msg_signature": crypto.sign(stamp, nonce, encrypted),
            "timestamp": stamp,
            "nonce": nonce,
        }
        body = (
            f"<xml><ToUserName><![CDATA[{self.corp_id}]]></ToUserName>"
            f"<Encrypt><![CDATA[{encrypted}]]></Encrypt>"
            f"<AgentID><![CDATA[{self.agent_id}]]></AgentID></xml>"
        ).encode()
        return query, body

    def forgeries(self, plain: bytes) -> dict[str, tuple[int, dict[str, str], bytes]]:
        """Callbacks the application must refuse, by name, with the status each gets: for a
        shared webhook attack corpus."""
        query, body = self.sealed(plain)
        other_key = WeComCrypto(self.token, "B" * 43, self.corp_id)
        other_corp = WeComCrypto(self.token, self.encoding_aes_key, "ww_someone_else")
        return {
            "forged_signature": (401, {**query, "msg_signature": "0" * 40}, body),
            "unsigned": (401, {k: v for k, v in query.items() if k != "msg_signature"}, body),
            "stale": (401, *self.sealed(plain, timestamp=int(time.time()) - 3600)),
            "wrong_aes_key": (403, *self.sealed(plain, crypto=other_key)),
            "other_corp": (403, *self.sealed(plain, crypto=other_corp)),
        }

    async def post_callback(self, url: str, query: dict[str, str], body: bytes) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, params=query, data=body, headers={"Content-Type": "text/xml"}) as r,
        ):
            return r.status, await r.text()

    async def post_message(self, url: str, plain: bytes) -> tuple[int, str]:
        query, body = self.sealed(plain)
        return await self.post_callback(url, query, body)

    async def verify_url(self, url: str, echo: bytes = b"1616140317555161061") -> tuple[int, str]:
        stamp, nonce = str(int(time.time())), "263014780"
        echostr = self.crypto.encrypt(echo)
        query = {
            "msg_signature": self.crypto.sign(stamp, nonce, echostr),
            "timestamp": stamp,
            "nonce": nonce,
            "echostr": echostr,
        }
        async with aiohttp.ClientSession() as http, http.get(url, params=query) as response:
            return response.status, await response.text()
