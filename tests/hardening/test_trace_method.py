"""HTTP TRACE is a 405 everywhere, never a 500 (issue 15, finding 5b).

DRF's ``APIView.dispatch`` hands a request to the view attribute named after its method, lower-cased:
a viewset ``@action`` called ``trace`` answered TRACE on the list route and crashed without a pk.
"""

from __future__ import annotations

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.viewsets import ViewSetMixin

pytestmark = pytest.mark.django_db

HTTP_METHOD_NAMES = {"get", "post", "put", "patch", "delete", "head", "options", "trace", "connect"}


def _callbacks(patterns):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _callbacks(p.url_patterns)
        elif isinstance(p, URLPattern):
            yield p.callback


@pytest.mark.parametrize(
    "path",
    [
        "/api/jobs/jobs/",  # list
        "/api/jobs/jobs/1/",  # detail
        "/api/jobs/jobs/1/trace/",  # the decision-trace action itself
        "/api/accounts/me/",
        "/api/no-such-endpoint/",
    ],
)
def test_trace_on_the_api_is_a_405_with_the_error_body(api_client, make_user, path):
    api_client.force_authenticate(make_user())
    response = api_client.generic("TRACE", path)
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
    assert "TRACE" not in response["Allow"]


def test_the_allow_header_names_the_routes_real_methods(api_client, make_user):
    api_client.force_authenticate(make_user())
    allow = api_client.generic("TRACE", "/api/jobs/jobs/").headers["Allow"].split(", ")
    assert {"GET", "POST", "OPTIONS"} <= set(allow)
    assert "DELETE" not in allow  # jobs are cancelled, not deleted


@pytest.mark.parametrize("path", ["/inventory/", "/accounts/login/", "/", "/healthz", "/admin/"])
def test_trace_on_a_page_is_a_405_signed_in_or_not(client, make_user, path):
    assert client.generic("TRACE", path).status_code == 405
    client.force_login(make_user())
    response = client.generic("TRACE", path)
    assert response.status_code == 405
    assert "TRACE" not in response["Allow"]


def test_the_decision_trace_still_answers_get(api_client, make_user):
    api_client.force_authenticate(make_user())
    assert reverse("job-trace", kwargs={"pk": 7}) == "/api/jobs/jobs/7/trace/"
    assert api_client.get("/api/jobs/jobs/999999/trace/").status_code == 404  # routed, the job is not there


def test_no_viewset_names_an_action_or_method_after_an_http_method():
    """A viewset attribute named like an HTTP method is what DRF dispatches that method to."""
    offenders = []
    seen = set()
    for callback in _callbacks(get_resolver().url_patterns):
        cls = getattr(callback, "cls", None)
        if cls is None or cls in seen or not issubclass(cls, ViewSetMixin):
            continue
        seen.add(cls)
        for action in cls.get_extra_actions():
            if action.__name__ in HTTP_METHOD_NAMES:
                offenders.append(f"{cls.__module__}.{cls.__name__}.{action.__name__}")
        for name in HTTP_METHOD_NAMES - {"options"}:  # ViewSet.options is DRF's own metadata answer
            if any(name in vars(klass) for klass in cls.__mro__ if klass.__module__.startswith("apps.")):
                offenders.append(f"{cls.__module__}.{cls.__name__}.{name}")
    assert len(seen) > 20  # the scan reached the project's viewsets
    assert not offenders, offenders
