"""The group robots of the chat platforms Chinese teams use: DingTalk (钉钉), WeCom (企业微信) and Feishu
(飞书). Each takes a JSON POST to the webhook address the group's robot settings show, and each has
its own way of proving the sender — implemented here exactly as the vendor documents it:

**DingTalk custom robot** (自定义机器人), "sign request" (加签) security setting:
    string_to_sign = timestamp + "\\n" + secret, HmacSHA256 **with the secret as the key** over it,
    Base64, then urlEncode (UTF-8); ``timestamp`` (milliseconds, within an hour of the call) and
    ``sign`` are appended to the webhook URL as query parameters. The secret is the string starting
    with ``SEC`` shown under "Sign request" on the robot's security settings page.
    Source: https://help.dingtalk.io/open/dingstart/customize-robot-security-settings (the vendor's
    page, with its Java and Python samples; the Chinese original, open.dingtalk.com/document/robots/
    customize-robot-security-settings, is quoted word for word at https://www.mihaoyun.com/wordpress/?p=391).
    Endpoint, ``msgtype`` and the query parameters: https://help.dingtalk.io/open/development/
    custom-robots-send-group-messages ("append the timestamp and sign parameters"; at most 20
    messages a minute per robot). ``markdown`` has ``title`` (shown in the conversation list) and
    ``text``: https://developer.alibaba.com/doc2/apiDetail.htm?apiId=37246 (dingtalk.oapi.robot.send).
    The answer is ``{"errcode": 0, "errmsg": "ok"}`` when accepted.

**Feishu custom bot** (自定义机器人), "signature verification" (签名校验):
    timestamp + "\\n" + secret is the **HMAC-SHA256 key**, the message is empty; the digest in
    Base64 is ``sign``. ``timestamp`` (seconds, within an hour) and ``sign`` go **in the JSON body**
    next to ``msg_type`` / ``content``. Source: the Feishu guide "Use custom bots in a group"
    (https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot; help centre
    https://www.feishu.cn/hc/en-US/articles/360024984973 for the webhook address
    ``https://open.feishu.cn/open-apis/bot/v2/hook/<token>``). Its Python sample (``hmac.new(key_enc,
    msg_enc)`` with ``key = f'{timestamp}\\n{secret}'`` and ``msg = ""``) is quoted at
    http://www.createh5.com/post/277.html; the key/message order differs from DingTalk's, a known
    pitfall (https://blog.csdn.net/zhanglili1993/article/details/136473704, which also quotes the
    refusal ``{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current
    time"}``). Text message: ``{"msg_type": "text", "content": {"text": ...}}``. Accepted: ``code`` 0
    (older answers: ``StatusCode`` 0).

**WeCom group robot** (群机器人): no signature — the ``key`` in the webhook URL
    (``https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=<key>``) is the credential, so the URL
    is a secret. Text message ``{"msgtype": "text", "text": {"content": ...}}``, content at most 2048
    bytes of UTF-8. Source: https://work.weixin.qq.com/api/doc/90000/90136/91770 (群机器人配置说明).
    Accepted: ``errcode`` 0.

Every request goes through the outbound address policy (``apps.core.outbound``); this module only
builds URLs and bodies and reads the verdict.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from urllib.parse import parse_qs, quote_plus, urlsplit, urlunsplit

DINGTALK, WECOM, FEISHU = "dingtalk", "wecom", "feishu"
WECOM_TEXT_LIMIT = 2048  # bytes of UTF-8 (the vendor's limit for text content)


def dingtalk_sign(secret: str, timestamp_ms: str) -> str:
    """Base64 of HmacSHA256(key=secret, message=timestamp + "\\n" + secret), before urlEncode."""
    string_to_sign = f"{timestamp_ms}\n{secret}".encode()
    return base64.b64encode(hmac.new(secret.encode(), string_to_sign, hashlib.sha256).digest()).decode()


def feishu_sign(secret: str, timestamp_s: str) -> str:
    """Base64 of HMAC-SHA256(key=timestamp + "\\n" + secret, message=empty)."""
    key = f"{timestamp_s}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def _with_query(url: str, extra: str) -> str:
    parts = urlsplit(url)
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


def target_problem(channel: str, url: str) -> str | None:
    """Why ``url`` is not a webhook address of ``channel``'s robots (None: it has the vendor's shape).
    The host is not pinned to the vendor's (a private deployment or a relay may front it); the
    outbound address policy decides where the worker may post."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if channel == DINGTALK and not query.get("access_token"):
        return "access_token"
    if channel == WECOM and not query.get("key"):
        return "key"
    if channel == FEISHU and "/open-apis/bot/v2/hook/" not in parts.path:
        return "/open-apis/bot/v2/hook/"
    return None


def _truncate_utf8(text: str, limit: int) -> str:
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: limit - 3].decode("utf-8", errors="ignore") + "…"


def build(channel: str, url: str, secret: str, *, title: str, text: str, now: float) -> tuple[str, bytes]:
    """The URL to post to and the JSON body of one message (``now``: Unix seconds)."""
    if channel == DINGTALK:
        body = {"msgtype": "markdown", "markdown": {"title": title, "text": f"#### {title}\n\n{text}"}}
        if secret:
            stamp = str(int(now * 1000))
            url = _with_query(url, f"timestamp={stamp}&sign={quote_plus(dingtalk_sign(secret, stamp))}")
    elif channel == WECOM:
        body = {"msgtype": "text", "text": {"content": _truncate_utf8(f"{title}\n{text}", WECOM_TEXT_LIMIT)}}
    elif channel == FEISHU:
        body = {"msg_type": "text", "content": {"text": f"{title}\n{text}"}}
        if secret:
            stamp = str(int(now))
            body = {"timestamp": stamp, "sign": feishu_sign(secret, stamp), **body}
    else:
        raise ValueError(f"not a robot channel: {channel}")
    return url, json.dumps(body, ensure_ascii=False).encode()


def refusal_code(channel: str, answer: dict | None) -> int | str | None:
    """The robot's error code when its JSON answer refuses the message; None when it accepted it.
    An answer that is not the vendor's JSON counts as a refusal ("?")."""
    if answer is None:
        return "?"
    keys = ("code", "StatusCode") if channel == FEISHU else ("errcode",)
    for key in keys:
        if key in answer:
            code = answer[key]
            if code == 0:
                return None
            return code if isinstance(code, int) and not isinstance(code, bool) else "?"
    return "?"
