"""Hostile requests against one route of a running daemon, through a real HTTP client.

Every request must be answered in time (within `bound_s`, the listener's configured timeouts
plus a margin) with a status below 500, or a deliberate 503 (shutting down, backlog full, too
many connections); and a refusal must be JSON or plain text, never a traceback.

To run it over a new webhook channel, describe its route and how a genuine request is signed:

    def sign(body: bytes, at: float) -> dict[str, str]:
        # The headers the platform would send with `body` at time `at`, correctly signed.
        return {"X-Hub-Signature-256": "sha256=" + hmac.new(SECRET, body, sha256).hexdigest()}

    route = Route("POST", daemon.http_url + "/whatsapp/webhook", sign=sign, signature_headers=(
        "X-Hub-Signature-256",))
    await run_fixed_corpus(route)          # forged/missing/stale signatures, bad bodies, ...
    await run_random_corpus(route, examples=30)   # hypothesis: random bytes, JSON, headers

and assert what the channel must not have done (nothing published for forged requests) with
the platform's fake. `tests/e2e/test_http_attacks.py` runs it over every route the daemon serves,
`tests/e2e/test_webhook_attacks.py` over every platform webhook.

A platform that signs in the URL's query string rather than in headers (WeCom's
`msg_signature`, `timestamp`, `nonce`; the `hub.*` of WhatsApp's verification GET) returns
those from `sign` too and names them in `query_params`: `send` moves them into the query, so
the forgery cases corrupt and drop them like headers. `sign` may also set the Content-Type
(a form body for Twilio, XML for WeCom); it overrides the corpus's JSON default. A platform
whose signature covers no time sets `timestamped=False` and tests its own notion of a stale
request (an old event timestamp in the body, a signature for a URL it no longer has).
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: (body, time the request claims to be from) -> the headers that make it genuine.
Sign = Callable[[bytes, float], Mapping[str, str]]
DELIBERATE_5XX = frozenset({503})
#: The statuses that count as a forged or unsigned request refused (each channel picks one).
REFUSED: tuple[int, ...] = (401, 403)
TRACE_MARKERS = ("Traceback", 'File "', "Exception:")


@dataclass(frozen=True)
class Route:
    method: str
    url: str
    #: Makes a request genuine; None for routes without a signature (health, metrics).
    sign: Sign | None = None
    #: The headers `sign` sets, corrupted and dropped by the forgery cases.
    signature_headers: tuple[str, ...] = ()
    #: Whether the signature covers a timestamp (so a stale one must be refused).
    timestamped: bool = False
    #: How long any request may take to be answered.
    bound_s: float = 15.0
    #: Headers every request carries (an API token, a content type).
    base_headers: Mapping[str, str] = field(default_factory=dict)
    #: Names among those `sign` returns that travel in the URL's query string, not as headers.
    query_params: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    case: str
    status: int
    body: bytes
    elapsed_s: float


class AttackFailed(AssertionError):
    pass


async def send(route: Route, case: str, body: bytes | None, headers: Mapping[str, str]) -> Outcome:
    """One request; fails when it is answered with an undeliberate 5xx, a trace, or late."""
    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=route.bound_s)
    merged = {**route.base_headers, **headers}
    query = {name: value for name, value in merged.items() if name in route.query_params}
    only_headers = {name: value for name, value in merged.items() if name not in query}
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout, skip_auto_headers=("Content-Type",)) as http,
            http.request(
                route.method,
                route.url,
                # aiohttp warns about large raw bytes; a file-like body streams.
                data=io.BytesIO(body) if body and len(body) > 2**19 else body,
                headers=only_headers,
                params=query or None,
            ) as response,
        ):
            raw = await response.read()
            status = response.status
    except TimeoutError:
        raise AttackFailed(f"{case}: no answer within {route.bound_s} s") from None
    except aiohttp.ClientConnectionError:
        # Closing the connection is a valid answer to garbage (a malformed request line, a
        # body refused before it was all sent).
        return Outcome(case, 0, b"", time.monotonic() - started)
    outcome = Outcome(case, status, raw, time.monotonic() - started)
    check(outcome)
    return outcome


def check(outcome: Outcome) -> None:
    if outcome.status >= 500 and outcome.status not in DELIBERATE_5XX:
        raise AttackFailed(f"{outcome.case}: HTTP {outcome.status}: {outcome.body[:300]!r}")
    text = outcome.body.decode(errors="replace")
    if any(marker in text for marker in TRACE_MARKERS):
        raise AttackFailed(f"{outcome.case}: the answer shows a trace: {text[:300]}")


def _signed(route: Route, body: bytes, at: float | None = None) -> dict[str, str]:
    if route.sign is None:
        return {}
    return dict(route.sign(body, time.time() if at is None else at))


def _forged(headers: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    forged = dict(headers)
    for name in names:
        value = forged.get(name, "")
        forged[name] = value[:-4] + ("0000" if not value.endswith("0000") else "1111")
    return forged


def fixed_cases(route: Route, genuine: bytes) -> list[tuple[str, bytes | None, dict[str, str]]]:
    """(case, body, headers): the hand-picked hostile requests."""
    json_type = {"Content-Type": "application/json"}

    def genuine_headers(body: bytes) -> dict[str, str]:
        # Signed like the platform would: each body case gets past the signature check.
        return {**json_type, **_signed(route, body)}

    signed = genuine_headers(genuine)
    bodies = {
        "empty json body": b"",
        "random bytes": bytes(range(256)) * 4,
        "invalid utf-8 json": b'{"a": "\xff\xfe"}',
        "not json": b"hello",
        "json list": b"[1, 2, 3]",
        "json number": b"1e999",
        "json null": b"null",
        "deep nesting": b"[" * 100_000 + b"]" * 100_000,
        "deep object nesting": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        "lone surrogate": b'{"text": "\\ud800", "chat_id": "\\udfff"}',
        "odd field types": json.dumps(
            {
                "update_id": "1",
                "message": 5,
                "type": [],
                "event": "x",
                "challenge": {},
                "chat_id": None,
                "content": 1e308,
            }
        ).encode(),
        "odd nested types": json.dumps(
            {
                "update_id": 1,
                "message": {"chat": None, "text": []},
                "type": "event_callback",
                "event": {"type": "message", "channel": [], "user": {}, "text": None},
            }
        ).encode(),
        "url verification without challenge": b'{"type": "url_verification"}',
    }
    cases: list[tuple[str, bytes | None, dict[str, str]]] = [("no body", None, {})]
    cases += [(name, body, genuine_headers(body)) for name, body in bodies.items()]
    cases += [
        ("oversized body", b"x" * 3_000_000, json_type),
        ("wrong content type", genuine, {**signed, "Content-Type": "text/plain"}),
        ("non-ascii header", genuine, {**signed, "Authorization": "Bearer t\u00e9st"}),
        ("huge header", genuine, {**signed, "X-Padding": "a" * 20_000}),
        ("evil host", genuine, {**signed, "Host": "evil.example"}),
        ("cross-site origin", genuine, {**signed, "Origin": "https://evil.example"}),
    ]
    if route.signature_headers:
        missing = {k: v for k, v in signed.items() if k not in route.signature_headers}
        cases += [
            ("forged signature", genuine, _forged(signed, route.signature_headers)),
            ("missing signature", genuine, missing),
            ("non-ascii signature", genuine, {**signed, route.signature_headers[0]: "v0=\u00e9"}),
            ("signature of another body", genuine + b" ", signed),
        ]
    if route.timestamped:
        stale = {**json_type, **_signed(route, genuine, at=time.time() - 3600)}
        cases.append(("stale signature", genuine, stale))
    return cases


async def run_fixed_corpus(route: Route, genuine: bytes = b"{}") -> dict[str, Outcome]:
    """Every fixed case against `route`; the outcomes by case, for further checks."""
    outcomes: dict[str, Outcome] = {}
    for case, body, headers in fixed_cases(route, genuine):
        outcomes[case] = await send(route, case, body, headers)
    return outcomes


# Random input: bytes, JSON of any shape, and headers made of what HTTP allows.
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
_token = st.text(
    alphabet=st.characters(
        min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=':()<>@,;\\"/[]?={}'
    ),
    min_size=1,
    max_size=20,
)
_header_value = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=60,
).map(str.strip)
_headers = st.dictionaries(_token, _header_value, max_size=5).filter(
    lambda found: (
        not {name.lower() for name in found} & {"content-length", "transfer-encoding", "host"}
    )
)
_body = st.one_of(
    st.binary(max_size=2000),
    _json.map(lambda value: json.dumps(value).encode()),
)


async def run_random_corpus(route: Route, *, examples: int = 30) -> int:
    """`examples` random requests (body, headers, signed or not); how many were sent."""
    loop = asyncio.get_running_loop()
    sent = 0

    def one(body: bytes, headers: dict[str, str], signed: bool) -> None:
        nonlocal sent
        if signed:
            headers = {**headers, **_signed(route, body)}
        future = asyncio.run_coroutine_threadsafe(
            send(route, f"random {body[:60]!r} {headers}", body, headers), loop
        )
        future.result(route.bound_s + 5)
        sent += 1

    run = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )(given(body=_body, headers=_headers, signed=st.booleans())(one))
    # Hypothesis drives from a thread; each example runs on this loop, next to the daemon's
    # clients.
    await asyncio.to_thread(run)
    return sent


def json_error(outcome: Outcome) -> dict[str, Any]:
    """The JSON error body of a refusal."""
    parsed = json.loads(outcome.body)
    assert isinstance(parsed, dict), outcome
    assert isinstance(parsed.get("error"), str), outcome
    return parsed
