"""Issue 29 §6: the DingTalk, WeCom and Feishu group robots — each signed as its vendor documents it,
sent in the subscriber's language, through the outbound address policy.

The receivers are real HTTP servers on 127.0.0.1 (allowed in the test settings like the webhook tests,
config/settings/test.py) that check each request the way the vendor's server does, with the recipe
re-implemented here from the vendor's text (not from apps/notify/robots.py):

* DingTalk (https://help.dingtalk.io/open/dingstart/customize-robot-security-settings): HmacSHA256 with
  the secret as key over ``timestamp + "\\n" + secret``, Base64, urlEncode; ``timestamp`` (ms) and
  ``sign`` in the query string.
* Feishu (https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot, Python sample quoted at
  http://www.createh5.com/post/277.html): ``timestamp + "\\n" + secret`` is the HMAC-SHA256 key, the
  message is empty, Base64; ``timestamp`` (s) and ``sign`` in the JSON body.
* WeCom (https://work.weixin.qq.com/api/doc/90000/90136/91770): no signature, the ``key`` in the URL.

What a receiver answers when it refuses is this test's choice of JSON error code (only "non-zero
``errcode`` / ``code`` is a refusal" is taken from the vendors' pages); the vendors' exact refusal
codes are not claimed here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import transaction

from apps.accounts.models import Membership, UserPreference
from apps.core.errors import ValidationFailed
from apps.jobs.events import JOB_NOTIFICATIONS as JOB_EVENTS
from apps.notify import robots, services
from apps.notify.models import Delivery, Subscription

DING_SECRET = "SEC" + "3c0ffee" * 9  # the shape the vendor shows: a string starting with SEC
FEISHU_SECRET = "qx7Jw9bF2nYtZk1LmP4sVa"
WECOM_KEY = "693a91f6-7xxx-4bc4-97a0-0ec2sifa5aaa"  # the vendor page's example key


# ---------------------------------------------------------------------------- the vendors' recipes


def ding_expected(secret: str, timestamp: str) -> str:
    """The vendor's Python sample, line by line (before its urllib.parse.quote_plus)."""
    secret_enc = secret.encode("utf-8")
    string_to_sign = "{}\n{}".format(timestamp, secret)  # noqa: UP032 - as the vendor sample writes it
    string_to_sign_enc = string_to_sign.encode("utf-8")
    hmac_code = hmac.new(secret_enc, string_to_sign_enc, digestmod=hashlib.sha256).digest()
    return base64.b64encode(hmac_code).decode()


def feishu_expected(secret: str, timestamp: str) -> str:
    """The vendor's Python 3 sample, line by line."""
    key = f"{timestamp}\n{secret}"
    key_enc = key.encode("utf-8")
    msg = ""
    msg_enc = msg.encode("utf-8")
    hmac_code = hmac.new(key_enc, msg_enc, digestmod=hashlib.sha256).digest()
    return base64.b64encode(hmac_code).decode("utf-8")


def test_signing_matches_the_vendors_recipes_on_fixed_vectors():
    # The vendor pages' own sample secret and a fixed time: the schemes differ (key and message swap).
    for secret, ms in (("this is secret", "1577262236757"), (DING_SECRET, "1764745200000")):
        assert robots.dingtalk_sign(secret, ms) == ding_expected(secret, ms)
    for secret, s in (("this is secret", "1599360473"), (FEISHU_SECRET, "1764745200")):
        assert robots.feishu_sign(secret, s) == feishu_expected(secret, s)
    assert robots.dingtalk_sign("this is secret", "1599360473") != robots.feishu_sign(
        "this is secret", "1599360473"
    )
    # DingTalk's sign goes urlEncoded into the query; "+", "/" and "=" of Base64 must survive it.
    url, _body = robots.build(
        "dingtalk",
        "http://127.0.0.1/robot/send?access_token=t",
        DING_SECRET,
        title="t",
        text="x",
        now=1764745200.0,
    )
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert query["timestamp"] == ["1764745200000"] and query["access_token"] == ["t"]
    assert query["sign"] == [ding_expected(DING_SECRET, "1764745200000")]


# ---------------------------------------------------------------------------- receivers


class Robot:
    """A group robot on 127.0.0.1 that checks requests as its vendor's server does."""

    def __init__(self, vendor: str, secret: str):
        self.vendor, self.secret = vendor, secret
        self.requests: list[dict] = []
        self.accepted: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                parts = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(parts.query)
                body = json.loads(raw)
                outer.requests.append({"path": parts.path, "query": query, "body": body})
                ok = outer.verify(parts.path, query, body)
                if ok:
                    outer.accepted.append(body)
                answer = (
                    {"code": 0 if ok else 19021, "msg": "success" if ok else "sign match fail"}
                    if outer.vendor == "feishu"
                    else {"errcode": 0 if ok else 310000, "errmsg": "ok" if ok else "sign not match"}
                )
                data = json.dumps(answer).encode()
                self.send_response(200)  # the robots answer 200 also when they refuse
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        base = f"http://127.0.0.1:{self.server.server_port}"
        self.url = {
            "dingtalk": f"{base}/robot/send?access_token=tok-1",
            "wecom": f"{base}/cgi-bin/webhook/send?key={WECOM_KEY}",
            "feishu": f"{base}/open-apis/bot/v2/hook/5e3d587e-d78e-4a07",
        }[vendor]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def verify(self, path: str, query: dict, body: dict) -> bool:
        now = time.time()
        if self.vendor == "dingtalk":
            stamp, sign = query.get("timestamp", [""])[0], query.get("sign", [""])[0]
            fresh = stamp.isdigit() and abs(int(stamp) - now * 1000) < 3600 * 1000  # ms, within an hour
            good = hmac.compare_digest(sign, ding_expected(self.secret, stamp)) if stamp else False
            shaped = body.get("msgtype") == "markdown" and {"title", "text"} <= set(body.get("markdown", {}))
            return fresh and good and shaped and query.get("access_token") == ["tok-1"]
        if self.vendor == "feishu":
            stamp, sign = str(body.get("timestamp", "")), str(body.get("sign", ""))
            fresh = stamp.isdigit() and abs(int(stamp) - now) < 3600  # seconds, within an hour
            good = hmac.compare_digest(sign, feishu_expected(self.secret, stamp)) if stamp else False
            shaped = body.get("msg_type") == "text" and isinstance(body.get("content", {}).get("text"), str)
            return fresh and good and shaped
        shaped = body.get("msgtype") == "text" and isinstance(body.get("text", {}).get("content"), str)
        return query.get("key") == [WECOM_KEY] and shaped and len(body["text"]["content"].encode()) <= 2048

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def robot():
    made = []

    def make(vendor, secret=""):
        r = Robot(vendor, secret)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


@pytest.fixture
def team(make_user, make_project):
    admin = make_user("chat-admin")
    member = make_user("chat-member")
    project = make_project("vision", members=[admin], role="admin")
    Membership.objects.create(user=member, project=project, role="member")
    return project, admin, member


def _job_failed(project):
    event, message = JOB_EVENTS["failed"]
    with transaction.atomic():
        return services.notify(
            event,
            key=f"test:{time.monotonic_ns()}",
            message=message,
            params={"job": "train-7b", "project": project.slug, "reason": "exit code 137"},
            project=project,
        )


SECRETS = {"dingtalk": DING_SECRET, "feishu": FEISHU_SECRET, "wecom": ""}


def _text_of(vendor: str, body: dict) -> str:
    if vendor == "dingtalk":
        return body["markdown"]["text"]
    if vendor == "feishu":
        return body["content"]["text"]
    return body["text"]["content"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("vendor", ["dingtalk", "wecom", "feishu"])
@pytest.mark.parametrize("language", ["zh-hans", "en"])
def test_each_robot_gets_a_correctly_signed_message_in_the_subscribers_language(
    team, robot, vendor, language
):
    project, admin, _member = team
    bot = robot(vendor, SECRETS[vendor])
    sub = services.subscription_create(
        actor=admin,
        channel=vendor,
        target=bot.url,
        events=["job.failed"],
        project=project,
        secret=SECRETS[vendor],
        language=language,
    )
    assert sub.secret == SECRETS[vendor]
    assert _job_failed(project) == 1
    assert services.deliveries_send() == {"delivered": 1, "retrying": 0, "failed": 0}
    (body,) = bot.accepted
    text = _text_of(vendor, body)
    assert "train-7b" in text and "exit code 137" in text
    if language == "zh-hans":  # the catalogue's translation of the job-failed text and of the title
        assert "项目 vision 的作业 train-7b 失败" in text and "[算池]" in text
    else:
        assert "Job train-7b of project vision failed" in text and "[Suanchi]" in text
    delivery = Delivery.objects.get()
    assert delivery.state == "delivered" and delivery.response_status == 200


@pytest.mark.django_db(transaction=True)
def test_a_blank_language_follows_the_owners_preference(team, robot):
    project, admin, _member = team
    UserPreference.objects.create(user=admin, language="zh-hans")
    bot = robot("wecom")
    services.subscription_create(
        actor=admin, channel="wecom", target=bot.url, events=["job.failed"], project=project
    )
    _job_failed(project)
    services.deliveries_send()
    assert "失败" in _text_of("wecom", bot.accepted[0])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("vendor", ["dingtalk", "feishu"])
def test_a_wrong_secret_is_refused_by_the_robot_and_the_delivery_is_retried(team, robot, vendor):
    project, admin, _member = team
    bot = robot(vendor, SECRETS[vendor])
    wrong = "SEC" + "0" * 64 if vendor == "dingtalk" else "not-the-secret"
    services.subscription_create(
        actor=admin, channel=vendor, target=bot.url, events=["job.failed"], project=project, secret=wrong
    )
    _job_failed(project)
    assert services.deliveries_send() == {"delivered": 0, "retrying": 1, "failed": 0}
    assert len(bot.requests) == 1 and bot.accepted == []
    delivery = Delivery.objects.get()
    code = 19021 if vendor == "feishu" else 310000
    assert delivery.state == "pending" and delivery.last_error == (
        f"failed: the robot refused the message (error code {code})"
    )


@pytest.mark.django_db(transaction=True)
def test_an_unsigned_dingtalk_robot_gets_no_timestamp_or_sign(team, robot):
    project, admin, _member = team
    bot = robot("dingtalk", DING_SECRET)
    services.subscription_create(
        actor=admin, channel="dingtalk", target=bot.url, events=["job.failed"], project=project
    )
    _job_failed(project)
    services.deliveries_send()
    (request,) = bot.requests
    assert "sign" not in request["query"] and "timestamp" not in request["query"] and bot.accepted == []


@pytest.mark.django_db
def test_a_refused_address_is_a_clear_error_and_nothing_is_written(team, settings):
    project, admin, _member = team
    settings.SUANCHI = {**settings.SUANCHI, "OUTBOUND_ALLOWED_NETWORKS": []}
    for vendor, url in (
        ("dingtalk", "http://127.0.0.1:9/robot/send?access_token=x"),
        ("wecom", "http://169.254.169.254/cgi-bin/webhook/send?key=k"),
        ("feishu", "http://[::1]/open-apis/bot/v2/hook/t"),
    ):
        with pytest.raises(ValidationFailed) as exc:
            services.subscription_create(
                actor=admin, channel=vendor, target=url, events=["job.failed"], project=project
            )
        assert "not allowed" in exc.value.message and "refuses" in exc.value.message
    assert not Subscription.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_an_address_refused_at_send_time_sends_nothing(team, robot, settings):
    project, admin, _member = team
    bot = robot("feishu", FEISHU_SECRET)
    services.subscription_create(
        actor=admin,
        channel="feishu",
        target=bot.url,
        events=["job.failed"],
        project=project,
        secret=FEISHU_SECRET,
    )
    _job_failed(project)
    settings.SUANCHI = {**settings.SUANCHI, "OUTBOUND_ALLOWED_NETWORKS": []}  # the policy tightened since
    assert services.deliveries_send()["retrying"] == 1
    assert bot.requests == [] and Delivery.objects.get().last_error == "refused by the address policy"


@pytest.mark.django_db
def test_robot_subscriptions_refuse_bad_input_precisely(team):
    project, admin, _member = team
    cases = [
        ({"channel": "dingtalk", "target": "https://oapi.dingtalk.com/robot/send"}, "access_token"),
        ({"channel": "wecom", "target": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send"}, "key"),
        (
            {"channel": "feishu", "target": "https://open.feishu.cn/open-apis/im/v1/messages"},
            "/open-apis/bot/v2/hook/",
        ),
        (
            {
                "channel": "wecom",
                "target": f"http://127.0.0.1/cgi-bin/webhook/send?key={WECOM_KEY}",
                "secret": "x",
            },
            "not signed",
        ),
        (
            {"channel": "dingtalk", "target": "http://127.0.0.1/robot/send?access_token=t", "secret": "abc"},
            "SEC",
        ),
        (
            {"channel": "feishu", "target": "http://127.0.0.1/open-apis/bot/v2/hook/t", "language": "fr"},
            "language",
        ),
    ]
    for kwargs, words in cases:
        with pytest.raises(ValidationFailed) as exc:
            services.subscription_create(actor=admin, project=project, events=["job.failed"], **kwargs)
        assert words in exc.value.message, (kwargs, exc.value.message)
    assert not Subscription.objects.exists()


@pytest.mark.django_db
def test_the_page_adds_a_robot_without_echoing_its_secret(client, team):
    project, admin, _member = team
    client.force_login(admin)
    response = client.post(
        "/notifications/",
        {
            "channel": "dingtalk",
            "target": "http://127.0.0.1:9/robot/send?access_token=t",
            "secret": DING_SECRET,
            "language": "zh-hans",
            "events": ["job.failed", "alert.firing"],
            "project": project.pk,
        },
    )
    assert response.status_code == 200
    sub = Subscription.objects.get()
    assert sub.channel == "dingtalk" and sub.secret == DING_SECRET and sub.language == "zh-hans"
    assert DING_SECRET not in response.content.decode()
