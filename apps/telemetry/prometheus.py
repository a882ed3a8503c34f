"""A small Prometheus HTTP API client (stdlib ``urllib``; no extra dependency).

Only what telemetry needs: ``query_range`` (``POST /api/v1/query_range``, form-encoded so long
selectors fit), instant ``query``, and fetching an exporter's ``/metrics`` page. Errors become
``PrometheusError`` with Prometheus' own ``errorType`` / ``error`` text.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

USER_AGENT = "suanchi-telemetry/0.1"
MAX_SCRAPE_BYTES = 64 * 1024 * 1024


class PrometheusError(Exception):
    pass


def _check_url(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise PrometheusError(f"not an http(s) URL: {url!r}")
    return url


class PrometheusClient:
    def __init__(self, base_url: str, *, timeout: float = 30.0) -> None:
        self.base_url = _check_url(base_url).rstrip("/")
        self.timeout = timeout

    def _post(self, path: str, params: dict[str, Any]) -> Any:
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(  # noqa: S310 - scheme checked in _check_url
            f"{self.base_url}{path}",
            data=body,
            headers={"Content-Type": "application/x-www-form-urlencoded", "User-Agent": USER_AGENT},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                payload = json.loads(response.read().decode())
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read().decode())
            except (ValueError, OSError):
                raise PrometheusError(f"{path}: HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise PrometheusError(f"{self.base_url}{path}: {exc}") from exc
        if payload.get("status") != "success":
            raise PrometheusError(
                f"{path}: {payload.get('errorType', 'error')}: {payload.get('error', payload)}"
            )
        return payload["data"]

    def query_range(self, query: str, *, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A range query's matrix: ``[{"metric": {labels}, "values": [[ts, "value"], ...]}, ...]``."""
        data = self._post("/api/v1/query_range", {"query": query, "start": start, "end": end, "step": step})
        if data.get("resultType") != "matrix":
            raise PrometheusError(f"query_range returned {data.get('resultType')!r}, expected a matrix")
        return data["result"]

    def query(self, query: str, *, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": query}
        if at is not None:
            params["time"] = at
        data = self._post("/api/v1/query", params)
        return data["result"]


def scrape(url: str, *, timeout: float = 15.0) -> str:
    """An exporter's /metrics page as text."""
    request = urllib.request.Request(  # noqa: S310 - scheme checked in _check_url
        _check_url(url), headers={"Accept": "text/plain", "User-Agent": USER_AGENT}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return response.read(MAX_SCRAPE_BYTES).decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        raise PrometheusError(f"scrape {url}: {exc}") from exc
