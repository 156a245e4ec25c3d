"""The platform webhooks of `test_webhook_attacks.py`: a profile, a `Route` and a genuine
signer per channel, and how to send a message and read the replies as that platform.

Signers follow each platform's documentation and never the channel's own code: the fakes'
signers where they are independent of the channel (Twilio, WhatsApp, QQ); `hashlib`/`hmac`
here for LINE, Feishu and WeCom, whose fakes sign with the channel's module. The encrypted
bodies of Feishu and WeCom are sealed by their fakes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode

from tests.e2e.conftest import WAIT_S
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.line_server import FakeLine
from tests.fakes.qq_server import FakeQQ
from tests.fakes.twilio_server import FakeTwilio, twilio_signature
from tests.fakes.wecom_server import FakeWeCom
from tests.fakes.whatsapp_server import FakeWhatsApp, hub_signature
from tests.support.attack_corpus import REFUSED, Route, send

TWO_DAYS_S = 2 * 86400
#: Older than the 7 days the WhatsApp channel still answers.
THIRTY_DAYS_S = 30 * 86400
PATHS = {
    "twilio": "/twilio/sms",
    "whatsapp": "/whatsapp/webhook",
    "line": "/line/webhook",
    "feishu": "/feishu/events",
    "wecom": "/wecom/callback",
    "qq": "/qq/callback",
}
TWILIO_URL = "https://sms.example.com/twilio/sms"
TWILIO_OLD_URL = "https://old-host.example.com/twilio/sms"
#: Per platform: the sender the corpus uses and the one the forgery test uses, both allowed.
USERS = {
    "twilio": ("+15550000001", "+15550000002"),
    "whatsapp": ("15550000001", "15550000002"),
    "line": ("U" + "1" * 32, "U" + "2" * 32),
    "feishu": ("ou_corpus000000000000001", "ou_probe0000000000000001"),
    "wecom": ("alice", "bob"),
    "qq": ("corpus-openid", "probe-openid"),
}
WECOM_ECHO = b"echo-of-the-corpus"
WHATSAPP_CHALLENGE = "1158201444"

#: A request the platform never sends: (case, body, headers, the statuses that refuse it).
Extra = tuple[str, bytes, dict[str, str], tuple[int, ...]]


@dataclass(frozen=True)
class Fakes:
    twilio: FakeTwilio
    whatsapp: FakeWhatsApp
    line: FakeLine
    feishu: FakeFeishu
    wecom: FakeWeCom
    qq: FakeQQ


def _allow(platform: str) -> str:
    return ", ".join(f'"{user}"' for user in USERS[platform])


def profiles(fakes: Fakes) -> dict[str, str]:
    """One profile per webhook channel, each against its fake."""
    tw, wa, ln, fs, wc, qq = (
        fakes.twilio,
        fakes.whatsapp,
        fakes.line,
        fakes.feishu,
        fakes.wecom,
        fakes.qq,
    )
    channels = {
        "sms": f"""type: twilio
    account_sid: {tw.account_sid}
    auth_token: "{tw.auth_token}"
    from_number: "{tw.number}"
    public_url: {TWILIO_URL}
    webhook_path: {PATHS["twilio"]}
    api_base_url: {tw.base_url}
    allow: [{_allow("twilio")}]""",
        "wa": f"""type: whatsapp
    access_token: "{wa.access_token}"
    phone_number_id: "{wa.phone_number_id}"
    app_secret: "{wa.app_secret}"
    verify_token: "{wa.verify_token}"
    api_base_url: {wa.base_url}
    allow: [{_allow("whatsapp")}]""",
        "ln": f"""type: line
    channel_secret: "{ln.channel_secret}"
    channel_access_token: "{ln.access_token}"
    webhook_path: {PATHS["line"]}
    api_base_url: {ln.api_base_url}
    data_api_base_url: {ln.data_api_base_url}
    allow: [{_allow("line")}]""",
        "fs": f"""type: feishu
    mode: webhook
    app_id: {fs.app_id}
    app_secret: {fs.app_secret}
    encrypt_key: "{fs.encrypt_key}"
    verification_token: {fs.verification_token}
    base_url: {fs.base_url}
    webhook_path: {PATHS["feishu"]}
    allow: [{_allow("feishu")}]""",
        "corp": f"""type: wecom
    corp_id: {wc.corp_id}
    agent_id: {wc.agent_id}
    secret: {wc.secret}
    token: {wc.token}
    encoding_aes_key: {wc.encoding_aes_key}
    api_base_url: {wc.base_url}
    webhook_path: {PATHS["wecom"]}
    allow: [{_allow("wecom")}]""",
        "qq": f"""type: qq-bot
    mode: webhook
    app_id: "{qq.app_id}"
    app_secret: "{qq.app_secret}"
    api_base_url: {qq.api_base_url}
    token_url: {qq.token_url}
    webhook_path: {PATHS["qq"]}
    allow: [{_allow("qq")}]""",
    }
    return {
        name: f"agent: {{type: echo}}\nchannels:\n  - {channel}\n"
        for name, channel in channels.items()
    }


@dataclass
class Platform:
    """One webhook channel of the daemon: its route, and how to talk to it as the platform."""

    profile: str
    route: Route
    #: (sender, text) -> the body of a genuine request carrying that message.
    message: Callable[[str, str], bytes]
    #: sender -> the texts the fake delivered to that sender's chat.
    replies: Callable[[str], list[str]]
    wait_until: Callable[[Callable[[], bool]], Awaitable[None]]
    #: (sender, text) -> the platform's own requests to refuse (its notion of stale).
    extras: Callable[[str, str], list[Extra]] = lambda _sender, _text: []
    #: Corpus cases that are not forgeries on this platform.
    not_forgeries: tuple[str, ...] = ()
    _numbers: list[int] = field(default_factory=lambda: [0])

    def marker(self, what: str) -> str:
        self._numbers[0] += 1
        return f"{what} {self._numbers[0]} {uuid.uuid4().hex[:8]}"

    async def genuine(self, sender: str, text: str) -> int:
        body = self.message(sender, text)
        headers = {"Content-Type": "application/json", **signed(self.route, body)}
        return (await send(self.route, f"genuine {text}", body, headers)).status

    async def barrier(self, sender: str) -> None:
        """A genuine message answered: everything the sender sent before it was dispatched."""
        text = self.marker("barrier")
        assert await self.genuine(sender, text) == 200
        await self.wait_until(lambda: self.replies(sender)[-1:] == [text])


def signed(route: Route, body: bytes, at: float | None = None) -> dict[str, str]:
    assert route.sign is not None
    return dict(route.sign(body, time.time() if at is None else at))


def _waiter(
    wait: Callable[[Callable[[], bool], float], Awaitable[None]],
) -> Callable[[Callable[[], bool]], Awaitable[None]]:
    return lambda condition: wait(condition, WAIT_S)


def twilio(fake: FakeTwilio, http: str) -> Platform:
    form_type = {"Content-Type": "application/x-www-form-urlencoded"}

    def params(body: bytes) -> dict[str, list[str]]:
        return parse_qs(body.decode(errors="replace"), keep_blank_values=True)

    def signature(body: bytes, url: str) -> dict[str, str]:
        return {
            **form_type,
            "X-Twilio-Signature": twilio_signature(fake.auth_token, url, params(body)),
        }

    def message(sender: str, text: str) -> bytes:
        form = fake.webhook_form(sender, text)
        return urlencode(
            [(name, value) for name, values in form.items() for value in values]
        ).encode()

    def extras(sender: str, text: str) -> list[Extra]:
        body = message(sender, text)
        other = message(sender, text.upper())
        return [
            ("signed for the url it used to have", body, signature(body, TWILIO_OLD_URL), REFUSED),
            ("signature of another form", body, signature(other, TWILIO_URL), REFUSED),
        ]

    route = Route(
        "POST",
        http + PATHS["twilio"],
        sign=lambda body, _at: signature(body, TWILIO_URL),
        signature_headers=("X-Twilio-Signature",),
    )
    # The signature covers the parsed form, not the bytes: a body that parses the same (one
    # with trailing whitespace, which aiohttp strips) is the same request.
    return Platform(
        "sms",
        route,
        message,
        fake.texts_to,
        _waiter(fake.wait_until),
        extras,
        not_forgeries=("signature of another body",),
    )


def whatsapp(fake: FakeWhatsApp, http: str) -> Platform:
    def sign(body: bytes, at: float) -> Mapping[str, str]:
        del at  # Meta signs the body only
        return {"X-Hub-Signature-256": hub_signature(fake.app_secret, body)}

    def extras(sender: str, text: str) -> list[Extra]:
        # Acknowledged (else Meta retries for days) and dropped as too old.
        old = fake.text_notification(sender, text, timestamp=time.time() - THIRTY_DAYS_S)
        headers = {**sign(old, 0), "Content-Type": "application/json"}
        return [("a message thirty days old", old, headers, (200,))]

    route = Route(
        "POST",
        http + PATHS["whatsapp"],
        sign=sign,
        signature_headers=("X-Hub-Signature-256",),
    )
    return Platform(
        "wa", route, fake.text_notification, fake.texts_to, _waiter(fake.wait_until), extras
    )


def whatsapp_verification(fake: FakeWhatsApp, http: str) -> Route:
    """Meta's GET handshake: the verify token in the query, the challenge answered."""

    def sign(body: bytes, at: float) -> Mapping[str, str]:
        del body, at
        return {
            "hub.mode": "subscribe",
            "hub.verify_token": fake.verify_token,
            "hub.challenge": WHATSAPP_CHALLENGE,
        }

    return Route(
        "GET",
        http + PATHS["whatsapp"],
        sign=sign,
        signature_headers=("hub.verify_token",),
        query_params=("hub.mode", "hub.verify_token", "hub.challenge"),
    )


def line(fake: FakeLine, http: str) -> Platform:
    def sign(body: bytes, at: float) -> Mapping[str, str]:
        del at  # LINE signs the body only: base64 of its HMAC-SHA256 with the channel secret
        digest = hmac.new(fake.channel_secret.encode(), body, hashlib.sha256).digest()
        return {"X-Line-Signature": base64.b64encode(digest).decode()}

    def message(sender: str, text: str, *, at_ms: int | None = None) -> bytes:
        return fake.body_of([fake.text_event(sender, text, timestamp_ms=at_ms)])

    def extras(sender: str, text: str) -> list[Extra]:
        old = message(sender, text, at_ms=int((time.time() - TWO_DAYS_S) * 1000))
        headers = {**sign(old, 0), "Content-Type": "application/json"}
        return [("an event two days old", old, headers, REFUSED)]

    route = Route("POST", http + PATHS["line"], sign=sign, signature_headers=("X-Line-Signature",))
    return Platform("ln", route, message, fake.texts_to, _waiter(fake.wait_until), extras)


def feishu(fake: FakeFeishu, http: str) -> Platform:
    def sign(body: bytes, at: float) -> Mapping[str, str]:
        # Hex SHA-256 of timestamp + nonce + encrypt key + body.
        stamp, nonce = str(int(at)), uuid.uuid4().hex
        digest = hashlib.sha256((stamp + nonce + fake.encrypt_key).encode() + body).hexdigest()
        return {
            "X-Lark-Request-Timestamp": stamp,
            "X-Lark-Request-Nonce": nonce,
            "X-Lark-Signature": digest,
        }

    def chat(sender: str) -> str:
        return "oc_" + sender.removeprefix("ou_")

    def message(sender: str, text: str) -> bytes:
        _headers, body = fake.sealed(fake.message_event(sender, chat(sender), text), signed=False)
        return body

    route = Route(
        "POST",
        http + PATHS["feishu"],
        sign=sign,
        signature_headers=("X-Lark-Signature",),
        timestamped=True,
    )
    return Platform(
        "fs", route, message, lambda sender: fake.texts(chat(sender)), _waiter(fake.wait_until)
    )


_ENCRYPT = re.compile(rb"<Encrypt><!\[CDATA\[(.*?)\]\]></Encrypt>", re.DOTALL)


def _wecom_signature(token: str, stamp: str, nonce: str, encrypted: str) -> str:
    # Hex SHA-1 of the sorted, concatenated token, timestamp, nonce and encrypted payload.
    return hashlib.sha1("".join(sorted([token, stamp, nonce, encrypted])).encode()).hexdigest()


def _wecom_query(token: str, at: float, encrypted: str) -> dict[str, str]:
    stamp, nonce = str(int(at)), str(uuid.uuid4().int % 10**9)
    return {
        "msg_signature": _wecom_signature(token, stamp, nonce, encrypted),
        "timestamp": stamp,
        "nonce": nonce,
    }


WECOM_QUERY = ("msg_signature", "timestamp", "nonce", "echostr")


def wecom(fake: FakeWeCom, http: str) -> Platform:
    def sign(body: bytes, at: float) -> Mapping[str, str]:
        found = _ENCRYPT.search(body)
        encrypted = found.group(1).decode(errors="replace") if found else ""
        return {"Content-Type": "text/xml", **_wecom_query(fake.token, at, encrypted)}

    def message(sender: str, text: str) -> bytes:
        _query, body = fake.sealed(fake.text_message(sender, text))
        return body

    route = Route(
        "POST",
        http + PATHS["wecom"],
        sign=sign,
        signature_headers=("msg_signature",),
        timestamped=True,
        query_params=WECOM_QUERY,
    )
    # The signature covers the <Encrypt> element only: bytes added around it change nothing.
    return Platform(
        "corp",
        route,
        message,
        fake.texts,
        _waiter(fake.wait_until),
        not_forgeries=("signature of another body",),
    )


def wecom_verification(fake: FakeWeCom, http: str) -> Route:
    """WeCom's GET URL check: the signed, encrypted `echostr` must be answered decrypted."""
    echostr = fake.crypto.encrypt(WECOM_ECHO)

    def sign(body: bytes, at: float) -> Mapping[str, str]:
        del body
        return {**_wecom_query(fake.token, at, echostr), "echostr": echostr}

    return Route(
        "GET",
        http + PATHS["wecom"],
        sign=sign,
        signature_headers=("msg_signature",),
        timestamped=True,
        query_params=WECOM_QUERY,
    )


def qq(fake: FakeQQ, http: str) -> Platform:
    def message(sender: str, text: str) -> bytes:
        return json.dumps(fake.c2c_message(sender, text)).encode()

    def extras(sender: str, text: str) -> list[Extra]:
        body = message(sender, text)
        ahead = fake.sign(body, timestamp=int(time.time()) + 3600)
        return [("signed an hour ahead", body, ahead, REFUSED)]

    route = Route(
        "POST",
        http + PATHS["qq"],
        sign=lambda body, at: fake.sign(body, timestamp=int(at)),
        signature_headers=("X-Signature-Ed25519",),
        timestamped=True,
    )
    return Platform(
        "qq",
        route,
        message,
        lambda sender: fake.replies_to(f"c2c:{sender}"),
        _waiter(fake.wait_until),
        extras,
    )
