"""A fake Feishu/Lark open platform: see `server.py` (REST API and long connection) and
`events.py` (events and webhook requests)."""

from tests.fakes.feishu_server.events import DOC_ENCRYPT_KEY, FeishuEventSender
from tests.fakes.feishu_server.server import MAX_BODY_BYTES, FakeFeishu, FeishuMessage

__all__ = ["DOC_ENCRYPT_KEY", "MAX_BODY_BYTES", "FakeFeishu", "FeishuEventSender", "FeishuMessage"]
