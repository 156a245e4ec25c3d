"""X-Twilio-Signature: Twilio's proof that a webhook request is its own.

The signature is base64(HMAC-SHA1(auth_token, url + each POST parameter's name and value,
sorted by name)), over the exact URL Twilio called (`public_url`: behind a proxy the daemon
sees another one). The twilio library's `RequestValidator` computes it; the comparison is
`hmac.compare_digest`, in constant time. Twilio signs some URLs with the port and some without
(an inconsistency its own validator allows for), so both forms are accepted. A fragment
(Twilio's connection overrides, `#rc=3&rp=all`) is not part of the signed URL.

A request without the header is refused: octos checked the signature only when the header was
present, so leaving it out was enough to forge a message.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from twilio.request_validator import RequestValidator, add_port, remove_port

from channels.web.webhook import Verdict

SIGNATURE_HEADER = "X-Twilio-Signature"


class TwilioSignature:
    """Checks requests against one account's auth token and one public URL."""

    def __init__(self, auth_token: str, public_url: str) -> None:
        self._validator = RequestValidator(auth_token)
        # Connection overrides (`#rc=3&rp=all`) live in the fragment, which is never sent.
        parsed = urlsplit(public_url)._replace(fragment="")
        self._urls = tuple(dict.fromkeys([remove_port(parsed), add_port(parsed)]))

    def sign(self, params: Mapping[str, Sequence[str]], url: str | None = None) -> str:
        """The signature of `params` posted to `url` (default: the public URL)."""
        return str(self._validator.compute_signature(url or self._urls[0], _Multi(params)))

    def check(self, params: Mapping[str, Sequence[str]], offered: str | None) -> Verdict:
        if not offered:
            return Verdict.MISSING
        expected = [self.sign(params, url).encode() for url in self._urls]
        # Every candidate is compared, so the time taken does not say which one matched.
        matches = [hmac.compare_digest(candidate, offered.encode()) for candidate in expected]
        return Verdict.VALID if any(matches) else Verdict.WRONG


class _Multi(dict[str, list[str]]):
    """Repeated parameters as `RequestValidator.get_values` reads them (`getall`)."""

    def __init__(self, params: Mapping[str, Sequence[str]]) -> None:
        super().__init__({name: list(values) for name, values in params.items()})

    def getall(self, name: str) -> list[str]:
        return self[name]
