"""One contract for every API endpoint's refusals, in the shape of NetBox's ``APIViewTestCases`` (trimmed):
a test class describes an endpoint with :class:`Endpoint`, provides a :class:`Case` through its ``case``
fixture, and inherits the checks of :class:`APIContract`:

- anonymous callers get 401 (``not_authenticated``) on every route of the endpoint;
- a user of another project sees nothing: the object is not in the list, its detail and the member's
  actions on it are 404 (or 403 on a staff-only endpoint);
- a member (or a viewer) who is not staff gets 403 (``permission_denied``) on staff-only writes, and a
  viewer gets 403 on the members' actions;
- a method the endpoint does not serve is 405 (``method_not_allowed``);
- a body that is not JSON is 400 with the parser's message, and nothing is written.

The positive side is checked too (a member reads the object, staff read it), so a refusal can never pass
because the route is simply missing. Each app's ``test_api_contract.py`` holds its endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rest_framework.test import APIClient

Call = tuple[str, str, dict]  # (method, URL with "{pk}", JSON body)


@dataclass(frozen=True)
class Endpoint:
    """What an endpoint serves, and to whom. URLs may hold ``{pk}`` (the case's object)."""

    list: str
    detail: str | None = None
    # More reads of the object (an export, a sub-resource): anonymous 401, outsiders 404.
    detail_reads: tuple[str, ...] = ()
    # Writes only staff may make (members and viewers get 403).
    staff_writes: tuple[Call, ...] = ()
    # Writes a member of the object's project may make (outsiders 404, viewers 403).
    member_writes: tuple[Call, ...] = ()
    # (method, URL) the endpoint does not serve: 405.
    not_allowed: tuple[tuple[str, str], ...] = ()
    # (method, URL) of a write that parses a JSON body, sent by staff: bad JSON is 400.
    json_write: tuple[str, str] | None = None
    # Only staff may read (members get 403 on the list and the detail).
    staff_read: bool = False


@dataclass
class Case:
    """The people and the object of one endpoint's contract test."""

    pk: Any  # an object of the member's project
    member: Any  # a member of that project (not staff)
    outsider: Any  # a user of another project only
    staff: Any
    viewer: Any = None  # a viewer of the project, where the endpoint distinguishes viewers
    # Exactly what the member's list shows (None: only that it holds ``pk``), and the outsider's.
    member_sees: list | None = None
    outsider_sees: list = field(default_factory=list)
    # How many rows of the endpoint's model exist, to show a refused write wrote nothing (optional).
    count: Any = field(default=None, repr=False)


def _client(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def _call(client: APIClient, method: str, url: str, body: dict | None = None):
    if method in ("get", "head", "options"):
        return getattr(client, method)(url)
    return getattr(client, method)(url, body or {}, format="json")


def _ids(response) -> list:
    body = response.json()
    rows = body["results"] if isinstance(body, dict) and "results" in body else body
    return [row.get("id") for row in rows]


def assert_refused(response, status: int, code: str, what) -> None:
    """``response`` is ``status`` with the error body's ``code`` (apps/core/api/exceptions.py)."""
    assert response.status_code == status, (what, response.status_code, response.content[:300])
    assert response.json()["error"]["code"] == code, (what, response.json())


class APIContract:
    """Mixin for a pytest test class: set ``endpoint`` and define a ``case`` fixture returning a
    :class:`Case`. The class must run with the database (``pytestmark = pytest.mark.django_db``)."""

    endpoint: Endpoint

    def _url(self, url: str, case: Case) -> str:
        return url.format(pk=case.pk)

    def _reads(self, case: Case) -> list[str]:
        urls = [self.endpoint.list, *([self.endpoint.detail] if self.endpoint.detail else [])]
        return [self._url(u, case) for u in (*urls, *self.endpoint.detail_reads)]

    def _writes(self, case: Case) -> list[Call]:
        return [
            (m, self._url(u, case), b)
            for m, u, b in (*self.endpoint.staff_writes, *self.endpoint.member_writes)
        ]

    def test_anonymous_callers_get_401(self, case):
        anonymous = _client()
        for url in self._reads(case):
            assert_refused(anonymous.get(url), 401, "not_authenticated", ("get", url))
        for method, url, body in self._writes(case):
            assert_refused(_call(anonymous, method, url, body), 401, "not_authenticated", (method, url))

    def test_members_viewers_and_staff_read_it(self, case):
        readers = [case.staff] if self.endpoint.staff_read else [case.member, case.viewer, case.staff]
        readers = [u for u in readers if u is not None]
        for user in readers:
            client = _client(user)
            listed = client.get(self._url(self.endpoint.list, case))
            assert listed.status_code == 200, (user, listed.content[:300])
            assert case.pk in _ids(listed), (user, "the object is not listed")
            if user is case.member and case.member_sees is not None:
                assert sorted(_ids(listed)) == sorted(case.member_sees), listed.content[:300]
            if self.endpoint.detail:
                detail = client.get(self._url(self.endpoint.detail, case))
                assert detail.status_code == 200, (user, detail.content[:300])

    def test_another_projects_user_sees_nothing(self, case):
        client = _client(case.outsider)
        if self.endpoint.staff_read:
            for url in self._reads(case):
                assert_refused(client.get(url), 403, "permission_denied", ("get", url))
            return
        listed = client.get(self._url(self.endpoint.list, case))
        assert listed.status_code == 200, listed.content[:300]
        assert case.pk not in _ids(listed) and sorted(_ids(listed)) == sorted(case.outsider_sees), (
            listed.json()
        )
        for url in self._reads(case)[1:]:
            assert_refused(client.get(url), 404, "not_found", ("get", url))
        for method, url, body in self.endpoint.member_writes:
            url = self._url(url, case)
            assert_refused(_call(client, method, url, body), 404, "not_found", (method, url))

    def test_non_staff_writes_on_staff_only_routes_get_403(self, case):
        before = case.count() if case.count else None
        for user in [u for u in (case.member, case.viewer) if u is not None]:
            client = _client(user)
            if self.endpoint.staff_read:
                for url in self._reads(case):
                    assert_refused(client.get(url), 403, "permission_denied", (user, "get", url))
            for method, url, body in self.endpoint.staff_writes:
                url = self._url(url, case)
                assert_refused(
                    _call(client, method, url, body), 403, "permission_denied", (user, method, url)
                )
        if case.viewer is not None:
            client = _client(case.viewer)
            for method, url, body in self.endpoint.member_writes:
                url = self._url(url, case)
                assert_refused(
                    _call(client, method, url, body), 403, "permission_denied", ("viewer", method, url)
                )
        if before is not None:
            assert case.count() == before, "a refused write wrote something"

    def test_a_method_the_endpoint_does_not_serve_is_405(self, case):
        client = _client(case.staff)
        for method, url in self.endpoint.not_allowed:
            url = self._url(url, case)
            assert_refused(_call(client, method, url), 405, "method_not_allowed", (method, url))

    def test_a_body_that_is_not_json_is_400_with_the_parser_message(self, case):
        if self.endpoint.json_write is None:
            return
        method, url = self.endpoint.json_write
        before = case.count() if case.count else None
        response = getattr(_client(case.staff), method)(
            self._url(url, case), '{"name": "x",', content_type="application/json"
        )
        assert response.status_code == 400, response.content[:300]
        error = response.json()["error"]
        assert error["code"] == "parse_error" and error["message"].startswith("JSON parse error"), error
        if before is not None:
            assert case.count() == before
