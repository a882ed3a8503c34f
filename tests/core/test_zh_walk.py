"""Issue 29 §1: a zh-hans reader finds no English sentence on any page or in any API text field.

The demo (``load_demo``: the seeds' fleet, jobs, bills, batches, waves, migrations) is read as a
zh-hans staff user (``admin``) and a zh-hans member (``alice``): every page of the page URLconf that
takes no argument, the detail pages of one object of each kind (every route with a parameter is either
walked or named in ``NOT_PAGES`` with why), every list and detail endpoint of the API and the actions
that answer a GET (found from the URLconf, so a new endpoint is walked from its first day).

An "English sentence" is a run of at least three English words (``_english_runs``) in a text a person
reads: text nodes and the title / aria-label / placeholder / alt attributes of a page, outside
``<code>``, ``<pre>``, ``<script>``, ``<style>``, ``<kbd>``, ``<samp>``, ``<time>`` and ``.mono``;
every string value of an API answer. Names and identifiers are not sentences: the names people gave
things (projects, departments, users, nodes, jobs, templates, …, read from the database) are taken out
first, and URLs, paths, versions and words joined by ``_ - . / :`` are no words. What is left English is
in ``ALLOWED`` with why, and nothing else may be.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from django.apps import apps as django_apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import models
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import translation

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}

# ---- the detector ------------------------------------------------------------------------------------

_SKIPPED_TAGS = {"code", "pre", "script", "style", "kbd", "samp", "time", "svg", "textarea"}
_READ_ATTRIBUTES = ("title", "aria-label", "placeholder", "alt")
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
_URL = re.compile(r"\b(?:https?|wss?|ftp)://\S+|\bwww\.\S+|\S+@\S+\.\w+")
# One English word: letters only, lower case but for a capital first letter ("Pending", "a", "I").
_WORD = re.compile(r"^(?:[A-Z]?[a-z]+|I|A)$")
_PUNCTUATION = ".,;:!?()[]{}\"'“”‘’«»…"


def _english_runs(text: str, shortest: int = 3) -> list[str]:
    """The runs of ``shortest`` or more English words in ``text`` (after URLs are taken out)."""
    runs, current = [], []
    for token in _URL.sub(" ", text).split():
        word = token.strip(_PUNCTUATION)
        # "word," / "(word" keep the run going; "a_b", "x-y", "v1.2", "/p/q", "1000", 中文 end it.
        if word and _WORD.match(word) and not any(c in token for c in "_/\\=<>@#%&*+|~^$"):
            current.append(word)
            continue
        if len(current) >= shortest:
            runs.append(" ".join(current))
        current = []
    if len(current) >= shortest:
        runs.append(" ".join(current))
    return runs


# A badge, tag or chip is one or two words ("passed", "running", "nvlink-clique"): any lower-case
# English word there is English, a hyphenated one too; upper-case acronyms (GPU, MIG, HCCS) are not.
_BADGE_CLASSES = {"badge", "tag", "chip"}
_BADGE_WORD = re.compile(r"^[A-Z]?[a-z]{2,}(?:-[a-z]{2,})*$")


def _badge_words(text: str) -> list[str]:
    return [w for w in (t.strip(_PUNCTUATION) for t in _URL.sub(" ", text).split()) if _BADGE_WORD.match(w)]


class _Reader(HTMLParser):
    """The text a person reads on a page, element by element (skipped elements left out)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[bool] = []  # per open element: is it (or one above it) skipped?
        self.badges: list[bool] = []  # per open element: is it (or one above it) a badge?
        self.texts: list[str] = []
        self.badge_texts: list[str] = []

    def _skipped(self) -> bool:
        return bool(self.stack) and self.stack[-1]

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        classes = (attributes.get("class") or "").split()
        skipped = (
            self._skipped()
            or tag in _SKIPPED_TAGS
            or any(c == "mono" or c.endswith("--mono") for c in classes)
            or attributes.get("hidden") is not None
            and "data-page-text" not in attributes
        )
        if not skipped:
            self.texts.extend(attributes[a] for a in _READ_ATTRIBUTES if attributes.get(a))
        if tag == "div" and "data-page-text" in attributes:
            # The texts a page's script shows (the submit preview's labels, …): read them too.
            self.texts.extend(v for k, v in attrs if k.startswith("data-") and v and k != "data-page-text")
        if tag not in _VOID:
            self.stack.append(skipped)
            self.badges.append(bool(self.badges and self.badges[-1]) or bool(_BADGE_CLASSES & set(classes)))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.stack.pop()
            self.badges.pop()

    def handle_endtag(self, tag):
        if tag not in _VOID and self.stack:
            self.stack.pop()
            self.badges.pop()

    def handle_data(self, data):
        if not self._skipped() and data.strip():
            (self.badge_texts if self.badges and self.badges[-1] else self.texts).append(data)


def page_texts(body: str) -> tuple[list[str], list[str]]:
    """The texts of a page, and those of its badges, tags and chips."""
    reader = _Reader()
    reader.feed(body)
    return reader.texts, reader.badge_texts


def json_texts(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in json_texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in json_texts(v)]
    return []


# ---- names and identifiers ---------------------------------------------------------------------------

# Fields holding what people named or wrote (shown as written, in the language they wrote it).
_NAME_FIELDS = {
    "name", "display_name", "title", "description", "username", "first_name", "last_name", "email",
    "image", "notes", "note", "comment", "target_version", "model", "label", "summary", "slug", "key",
    "raw_model_name", "source_label", "interconnect", "architecture", "dataset", "source",
}  # fmt: skip
# Lists of names and citations: a model's product names and the sources its figures are cited from.
_NAME_LISTS = {"product_names", "sources", "k8s_resource_names"}


def names() -> list[str]:
    """Every name in the database, longest first (taken out of a text before it is read)."""
    found: set[str] = set()
    for model in django_apps.get_models():
        if not model.__module__.startswith("apps."):
            continue
        fields = [
            f.name
            for f in model._meta.get_fields()
            if isinstance(f, (models.CharField, models.TextField))
            and f.name in _NAME_FIELDS
            and not f.choices
        ]
        for field in fields:
            found.update(
                v for v in model.objects.values_list(field, flat=True).distinct() if v and len(v) > 3
            )
        for field in [f.name for f in model._meta.get_fields() if f.name in _NAME_LISTS]:
            for values in model.objects.values_list(field, flat=True):
                found.update(v for v in values or [] if isinstance(v, str) and len(v) > 3)
    return sorted(found, key=len, reverse=True)


def _without_names(text: str, taken_out: list[str]) -> str:
    for name in taken_out:
        if name in text:
            text = text.replace(name, " | ")
    return text


def english(texts: list[str], taken_out: list[str], badges: list[str] = ()) -> list[str]:
    runs = []
    for text in texts:
        runs.extend(r for r in _english_runs(_without_names(text, taken_out)) if not _allowed(r))
    for text in badges:
        runs.extend(f"[{w}]" for w in _badge_words(_without_names(text, taken_out)) if not _allowed(f"[{w}]"))
    return runs


# ---- what stays English, and why ---------------------------------------------------------------------

# A person's own words are shown as written in every language (apps.core.stored_text, ``user_``
# parameters); the demo types some in English, as a person might.
ALLOWED: dict[str, str] = {
    "accuracy within tolerance": "apps/demo/migration.py: a promotion's reason, typed",
    "of new runs": "apps/demo/migration.py: a shift's reason ('demo: 30 % of new runs'), typed",
    "decision the catalog has no": "apps/demo/inventory.py: a coefficient's reason, typed",
    "figure for this model": "apps/demo/inventory.py: the same reason",
    "fallen off the bus twice this week": "apps/demo/inventory.py: a card's cordon reason, typed",
}


def _allowed(run: str) -> bool:
    return any(pattern in run for pattern in ALLOWED)


# ---- what is walked ----------------------------------------------------------------------------------

_SKIP_NAMES = {"logout", "set_language", "healthz", "api-schema", "api-docs"}
_SKIP_PREFIXES = ("admin/", "api/", "i18n/", "static/", "media/")


def _routes():
    out = []

    def walk(patterns, prefix="", namespace=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern), p.namespace or namespace)
            elif isinstance(p, URLPattern):
                out.append((prefix + str(p.pattern), f"{namespace}:{p.name}" if namespace else str(p.name)))

    walk(get_resolver().url_patterns)
    return out


def simple_pages() -> list[str]:
    pages = []
    for route, name in _routes():
        if name.split(":")[-1] in _SKIP_NAMES or route.startswith(_SKIP_PREFIXES) or "<" in route:
            continue
        if "download" in route or "export" in route or route.endswith((".csv", ".zip", ".xlsx")):
            continue
        pages.append("/" + route.lstrip("^").rstrip("$"))
    return sorted(set(pages))


def _first(model_path: str, **filters):
    model = django_apps.get_model(model_path)
    return model.objects.filter(**filters).order_by("pk").first()


def detail_pages() -> list[str]:
    """One object of each kind behind each page route with a parameter (``PAGE_OBJECTS``)."""
    pages = []
    for route, name in _routes():
        if route.startswith(_SKIP_PREFIXES) or "<" not in route or name in NOT_PAGES:
            continue
        assert name in PAGE_OBJECTS, f"the page {name} ({route}) is neither walked nor in NOT_PAGES"
        for obj in PAGE_OBJECTS[name]():
            if obj is None:
                continue
            value = obj.slug if "<slug:slug>" in route else obj.pk
            pages.append("/" + re.sub(r"<[^>]+>", str(value), route))
    return pages


def _jobs():
    from apps.jobs.models import Job

    # One job per state (pending, running, failed, succeeded, …): their "why" panels differ.
    return [
        Job.objects.filter(state=s).order_by("pk").first()
        for s in Job.objects.values_list("state", flat=True).distinct()
    ]


PAGE_OBJECTS = {
    "inventory:node-detail": lambda: [_first("inventory.Node"), _first("inventory.Node", status="maintenance")],
    "inventory:device-detail": lambda: [_first("inventory.Device"), _first("inventory.Device", pool_status="gray")],
    "clusters:detail": lambda: [_first("inventory.Cluster")],
    "catalog:template-detail": lambda: [_first("catalog.ComputeTemplate")],
    "catalog:request-template-detail": lambda: [_first("catalog.DeviceRequestTemplate")],
    "jobs:detail": _jobs,
    "telemetry:project-detail": lambda: [_first("accounts.Project", slug="vision")],
    "telemetry:job-detail": lambda: [_first("jobs.Job", state="running")],
    "billing:bill-detail": lambda: [_first("billing.Bill")],
    "rollout:batch-detail": lambda: list(django_apps.get_model("rollout.GrayBatch").objects.order_by("pk")),
    "migration:service-detail": lambda: list(django_apps.get_model("migration.MigratedService").objects.all()),
    "core:run-progress": lambda: [_first("core.Run")] if django_apps.is_installed("apps.core") and _has("core.Run") else [],
}  # fmt: skip


def _has(model_path: str) -> bool:
    try:
        django_apps.get_model(model_path)
    except LookupError:
        return False
    return True


# Routes with a parameter that are no page: a POST action, a download, a fragment another page polls.
NOT_PAGES = {
    "inventory:node-action": "POST action",
    "clusters:edit": "a form (its labels are the cluster form's; walked on /clusters/new/)",
    "clusters:test": "POST action",
    "clusters:sync": "POST action",
    "catalog:template-edit": "a form (the same labels as /catalog/templates/new/)",
    "catalog:template-retire": "POST action",
    "jobs:pod": "a fragment of the job page (pod events and log lines, as Kubernetes wrote them)",
    "jobs:cancel": "POST action",
    "quotas:edit": "a form (the same labels as the quota form)",
    "telemetry:backfill": "a backfill's progress (walked when one exists: none in the demo)",
    "billing:bill-download": "a download (the bill files are read in test_bill_files_...)",
    "billing:period-progress": "a month close's progress (none in the demo)",
    "billing:period-export": "a download",
    "rollout:batch-live": "a fragment of the batch page",
    "rollout:batch-node-release": "POST action",
    "rollout:batch-action": "POST action",
    "rollout:wave-start": "POST action",
    "migration:service-shift": "POST action",
    "migration:service-rollback": "POST action",
    "migration:service-promote": "POST action",
    "migration:proposal-decide": "POST action",
    "notify:subscription-delete": "POST action",
    "notify:alert-rule-delete": "POST action",
    "accounts:token-revoke": "POST action",
    # JSON a page polls to redraw its charts (texts are the page's: walked with the device/node page)
    "telemetry:device-history": "chart JSON of the device page's history panel",
    "telemetry:node-history": "chart JSON of the node page's history panel",
}


def api_endpoints(client) -> list[str]:
    """Every API list endpoint, then the detail of its first row and the detail actions that answer a
    GET (the format-suffix duplicates aside)."""
    lists, details = [], []
    for route, _name in _routes():
        if not route.startswith("api/") or "format" in route or route.endswith(("schema/", "docs/")):
            continue
        path = "/" + route.replace("^", "").replace("$", "")
        if "(?P<pk>" in path:
            details.append(path)
        elif path.count("/") > 2:
            lists.append(path)
    urls = sorted(set(lists))
    for path in sorted(set(details)):
        base = path.split("(?P<pk>")[0]
        response = client.get(base, HTTP_ACCEPT="application/json", **ZH)
        if response.status_code != 200:
            continue
        body = response.json()
        rows = body.get("results", body) if isinstance(body, dict) else body
        if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
            continue
        for row in rows[:3]:
            pk = row.get("id", row.get("pk"))
            if pk is not None:
                urls.append(re.sub(r"\(\?P<pk>[^)]+\)", str(pk), path))
    return urls


# ---- the walk ----------------------------------------------------------------------------------------


@pytest.fixture
def demo(db, capsys):
    call_command("load_demo")
    capsys.readouterr()
    yield names()
    translation.activate(settings.LANGUAGE_CODE)


def _as(client, username: str):
    client.force_login(get_user_model().objects.get(username=username))
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    return client


@pytest.mark.parametrize("username", ["admin", "alice"])
def test_every_page_reads_in_chinese(client, demo, username):
    _as(client, username)
    found, walked, details = {}, 0, detail_pages()
    for url in simple_pages() + details:
        response = client.get(url, **ZH)
        if username == "admin" and url in details:
            assert response.status_code == 200, (url, response.status_code)  # staff read every object
        if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
            continue
        walked += 1
        texts, badges = page_texts(response.content.decode())
        runs = english(texts, demo, badges)
        if runs:
            found[url] = sorted(set(runs))
    assert walked >= 30, walked
    assert not found, json.dumps(found, ensure_ascii=False, indent=1)


@pytest.mark.parametrize("username", ["admin", "alice"])
def test_every_api_text_field_reads_in_chinese(client, demo, username):
    _as(client, username)
    found, walked = {}, 0
    for url in api_endpoints(client):
        response = client.get(url, HTTP_ACCEPT="application/json", **ZH)
        if response.status_code != 200 or "json" not in response.get("Content-Type", ""):
            continue
        walked += 1
        runs = english(json_texts(response.json()), demo)
        if runs:
            found[url] = sorted(set(runs))
    assert walked >= 40, walked
    assert not found, json.dumps(found, ensure_ascii=False, indent=1)


def test_the_detector_finds_a_sentence_and_leaves_names_and_identifiers():
    assert _english_runs("position 1 in the queue") == ["in the queue"]
    assert _english_runs("0/9 nodes are available: 6 insufficient free cards") == [
        "nodes are available",
        "insufficient free cards",
    ]
    assert (
        _english_runs("第 1 位 · nvidia-a100-80gb · GPU0 · cross_node · /ckpt/train https://a.b/c d e") == []
    )
    assert _english_runs("已通过 passed") == []
    assert english(["项目 Online inference team 的作业"], ["Online inference team"]) == []


def _preview_forms(project) -> list[dict]:
    from apps.catalog.models import DeviceModel

    base = {
        "project": project.pk,
        "name": "zh-preview",
        "kind": "training",
        "image": "pytorch:2.3",
        "replicas": 1,
        "priority_class": "normal",
        "max_retries": 0,
        "expected_duration_h": "1",
    }
    models_in_fleet = DeviceModel.objects.filter(devices__isnull=False).distinct().order_by("pk")[:4]
    forms = [
        # issue 29 §1: the 1000 CU request, refused outright
        {**base, "request_kind": "compute_units", "compute_units": "1000", "memory_gib": 40},
        {**base, "request_kind": "compute_units", "compute_units": "0.5", "memory_gib": 8},
        {**base, "request_kind": "compute_units", "compute_units": "3", "memory_gib": 5000},
    ]
    for model in models_in_fleet:
        forms += [
            {**base, "request_kind": "whole_cards", "device_model": model.pk, "count": 1},
            {**base, "request_kind": "whole_cards", "device_model": model.pk, "count": 8, "replicas": 4},
            {**base, "request_kind": "whole_cards", "device_model": model.pk, "count": 64},
        ]
    return forms


def test_the_submit_preview_reads_in_chinese(client, demo):
    """The preview's refusals, explanations and per-node reasons are the scheduler's English made
    Chinese (apps.scheduling.engine_texts), for requests that fit, wait and can never fit."""
    from apps.accounts.models import Project

    _as(client, "alice")
    project = Project.objects.get(slug="vision")
    found, refused, waiting = {}, 0, 0
    for form in _preview_forms(project):
        response = client.post("/jobs/submit/preview/", form, **ZH)
        assert response.status_code == 200, (form, response.status_code)
        body = response.json()
        refused += bool(body["errors"].get("__all__"))
        waiting += any(not a["placed"] and a["explanation"] for a in body["alternatives"])
        runs = english(json_texts(body), demo)
        if runs:
            found[json.dumps(form)] = sorted(set(runs))
    assert refused >= 2 and waiting >= 1, (refused, waiting)
    assert not found, json.dumps(found, ensure_ascii=False, indent=1)


def test_the_bill_files_read_in_chinese(client, demo):
    """A bill downloaded by a zh-hans reader has Chinese labels (CSV and XLSX); its numbers, names and
    identifiers are as in English."""
    import csv
    import io

    from openpyxl import load_workbook

    from apps.billing.models import Bill

    _as(client, "admin")
    bill = Bill.objects.order_by("pk").first()
    assert bill is not None
    csv_body = client.get(f"/billing/bills/{bill.pk}/download/csv/", **ZH)
    xlsx_body = client.get(f"/billing/bills/{bill.pk}/download/xlsx/", **ZH)
    assert csv_body.status_code == xlsx_body.status_code == 200
    rows = list(csv.reader(io.StringIO(csv_body.content.decode("utf-8-sig"))))
    sheet = load_workbook(io.BytesIO(xlsx_body.content)).active
    cells = [str(c) for row in sheet.iter_rows(values_only=True) for c in row if c is not None]
    for texts in ([c for row in rows for c in row], cells):
        labels = [row for row in texts if row]
        assert not english(labels, demo), english(labels, demo)
        # a label is one or two words: no English word may remain in the first column
        assert not [w for t in labels for w in _badge_words(_without_names(t, demo))], labels
    assert rows[0][0] != "Suanchi bill" and sheet.title != "Bill"
    with translation.override("zh-hans"):
        assert rows[-1][0] == str(translation.gettext("total"))


def test_every_partition_basis_reads_in_chinese(demo):
    """Where a partition template's numbers come from (``PartitionProfile.basis()``, English) is shown
    through registered ids (apps.catalog.selectors.profile_basis): every kind of partition in the demo's
    catalog (MIG, vNPU, AMD) reads in Chinese, with its figures."""
    from apps.catalog.models import ComputeTemplate
    from apps.catalog.partitions import partition_profile
    from apps.catalog.selectors import profile_basis

    kinds = set()
    for template in ComputeTemplate.objects.exclude(partition_profile="").select_related("device_model"):
        profile = partition_profile(template.device_model, template.partition_profile)
        with translation.override("zh-hans"):
            shown = profile_basis(profile)
        assert shown != profile.basis() and not english([shown], demo), (profile.basis(), shown)
        kinds.add(profile.kind)
    assert len(kinds) >= 2, kinds


def test_why_pending_follows_the_readers_language(client, demo):
    """The API's ``why_pending`` (issue 29 §1: "position 1 in the queue" for a zh-hans reader) and the
    trace's explanation are in the language the request asks for; English without one."""
    from apps.jobs.models import QUEUED_STATES, Job

    _as(client, "admin")
    client.cookies.pop(settings.LANGUAGE_COOKIE_NAME)
    job = Job.objects.filter(state__in=QUEUED_STATES).order_by("pk").first()
    assert job is not None
    english_body = client.get(f"/api/jobs/jobs/{job.pk}/trace/", HTTP_ACCEPT_LANGUAGE="en").json()
    chinese_body = client.get(f"/api/jobs/jobs/{job.pk}/trace/", **ZH).json()
    assert " in the queue" in english_body["why_pending"], english_body
    assert " in the queue" not in chinese_body["why_pending"] and "队列" in chinese_body["why_pending"]
    assert english_body["queue_position"] == chinese_body["queue_position"]  # identifiers stay
    assert english_body["state"] == chinese_body["state"] == job.state
    if english_body.get("explanation"):
        assert not english([chinese_body["explanation"]], demo), chinese_body["explanation"]
    translation.activate(settings.LANGUAGE_CODE)
    detail = client.get(f"/api/jobs/jobs/{job.pk}/", **ZH).json()
    assert detail["state_reason"] == _chinese(job.state_reason)


def _chinese(text: str) -> str:
    from apps.core.stored_text import localize

    with translation.override("zh-hans"):
        return localize(text)
