"""Get, list and watch: paging, the watch cache, bookmarks."""

from __future__ import annotations

import base64
import copy
import json
import time

from tests.kube.fake_apiserver.resources import (
    _PATH_RE,
    KIND_TO_PLURAL,
    RESOURCES,
    ApiError,
    Resource,
    _not_found,
)
from tests.kube.fake_apiserver.selectors import _field_match, labels_match, parse_label_selector
from tests.kube.fake_apiserver.store import _WatchStream, next_bookmark_time


class ReadsMixin:
    """Get, list and watch: paging, the watch cache, bookmarks. Mixed into :class:`FakeApiServer`."""

    def _get(self, res: Resource, ns: str, name: str) -> dict:
        obj = self._store.get((res.plural, ns, name))
        if obj is None:
            raise _not_found(res, name)
        return obj

    def _list(self, res: Resource, ns: str, query: dict) -> dict:
        """A ``<Kind>List``: items without ``kind`` / ``apiVersion`` (the list carries them, as the
        API's JSON does), ``metadata.resourceVersion``; ``limit`` / ``continue`` paging
        (https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks):
        every page comes from the snapshot of the first one (etcd serves them at its revision), the
        token is base64 JSON {v, rv, start} as the apiserver's storage encodes it, and a token whose
        revision was compacted (:meth:`compact`; the oldest of :attr:`list_snapshots_kept`) answers
        410 Expired. ``remainingItemCount`` only without selectors."""
        self._watch_flush()  # deletions get their resourceVersion: the list's version covers them
        reqs = parse_label_selector(query.get("labelSelector", [""])[0])
        fsel = query.get("fieldSelector", [""])[0]
        try:
            limit = int(query.get("limit", ["0"])[0] or 0)
        except ValueError:
            raise ApiError(400, "BadRequest", f"limit: Invalid value: {query['limit'][0]!r}") from None
        token = query.get("continue", [""])[0]
        requested_rv = query.get("resourceVersion", [""])[0]
        if requested_rv and requested_rv != "0" and not token:
            if not requested_rv.isdigit():
                raise ApiError(400, "BadRequest", f"resourceVersion: Invalid value: {requested_rv!r}")
            if int(requested_rv) > self._rv:
                # storage/cacher: a resourceVersion the server has not reached yet.
                raise ApiError(
                    504, "Timeout", f"Too large resource version: {requested_rv}, current: {self._rv}"
                )
            if (
                query.get("resourceVersionMatch", [""])[0] == "Exact"
                and int(requested_rv) < self._compacted_rv
            ):
                raise ApiError(
                    410, "Expired", f"too old resource version: {requested_rv} ({self._compacted_rv})"
                )
        if token:
            try:
                decoded = json.loads(base64.b64decode(token.encode() + b"==="))
                rv, start = int(decoded["rv"]), str(decoded["start"])
            except (ValueError, KeyError, TypeError):
                raise ApiError(400, "BadRequest", "continue key is not valid: illegal base64 data") from None
            snapshot = self._list_snapshots.get((rv, res.plural, ns))
            if snapshot is None:
                raise ApiError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You "
                    "can start a new list without the continue parameter, or use the continue token in "
                    "this response to retrieve the remainder of the results. Continuing with the provided "
                    "token results in an inconsistent list - objects that were created, modified, or "
                    "deleted between the time the first chunk was returned and now may show up in the list.",
                )
        else:
            rv, start = self._rv, ""
            snapshot = [
                (f"{ons}/{oname}", o)
                for (p, ons, oname), o in sorted(self._store.items())
                if p == res.plural and (not ns or ons == ns)
            ]
            if limit > 0:
                snapshot = [(k, copy.deepcopy(o)) for k, o in snapshot]
        matched = [
            (k, o)
            for k, o in snapshot
            if k > start and labels_match(o["metadata"].get("labels") or {}, reqs) and _field_match(o, fsel)
        ]
        page = matched[:limit] if limit > 0 else matched
        meta: dict = {"resourceVersion": str(rv)}
        if limit > 0 and len(matched) > limit:
            if (rv, res.plural, ns) not in self._list_snapshots:
                self._list_snapshots[(rv, res.plural, ns)] = snapshot
                while len(self._list_snapshots) > self.list_snapshots_kept:
                    self._list_snapshots.pop(next(iter(self._list_snapshots)))
            last = page[-1][0]
            meta["continue"] = (
                base64.b64encode(json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": last}).encode())
                .decode()
                .rstrip("=")
            )
            if not reqs and not fsel:
                meta["remainingItemCount"] = len(matched) - limit
        items = []
        for _k, o in page:
            item = copy.deepcopy(o)
            item.pop("kind", None)
            item.pop("apiVersion", None)
            items.append(item)
        return {"apiVersion": res.api_version, "kind": f"{res.kind}List", "metadata": meta, "items": items}

    def compact(self) -> None:
        """etcd compaction (the apiserver compacts every 5 minutes): older revisions are gone, so a
        continue token or an Exact resourceVersion from before now answers 410 Expired, and so does a
        watch from before now (the watch history is emptied: a watch served from etcd cannot start
        before its compacted revision, one served from the watch cache not before its window)."""
        with self._lock:
            self._watch_flush()
            self._list_snapshots.clear()
            self._compacted_rv = self._rv
            self._history.clear()
            self._history_rvs.clear()
            self._history_start = self._rv

    # -- watch -----------------------------------------------------------------------------------
    # https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes

    def _watch_key(self, obj: dict) -> tuple[str, str, str] | None:
        plural = KIND_TO_PLURAL.get(obj.get("kind", ""))
        if plural is None:
            return None
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace", "") if RESOURCES[plural].namespaced else ""
        return (plural, ns or "", meta.get("name", ""))

    def _record(self, key: tuple[str, str, str], type_: str, obj: dict, prev: dict | None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self._history.append((rv, key[0], key[1], type_, obj, prev))
        self._history_rvs.append(rv)
        if type_ == "DELETED":
            self._watch_last.pop(key, None)
        else:
            self._watch_last[key] = obj
        if len(self._history) > self.watch_history_size * 2:
            drop = len(self._history) - self.watch_history_size
            self._history_start = self._history_rvs[drop - 1]
            del self._history[:drop]
            del self._history_rvs[:drop]

    def _watch_flush(self) -> None:
        """Turn the writes since the last flush into watch events, in resourceVersion order: a new
        key ADDED, a new resourceVersion MODIFIED, a removed key DELETED with the object's last
        state and a resourceVersion of its own (etcd gives the delete a revision; the apiserver
        sets it on the deleted object: storage/etcd3/watcher.go). Several writes of one object
        between two flushes are one event with its latest state (as a watcher falling behind sees,
        never an older state after a newer one)."""
        store = self._store
        keys = set(store.touched) | set(store.removed)
        for obj in self._bumped:
            key = self._watch_key(obj)
            if key is not None:
                keys.add(key)
        removed = store.removed
        store.touched, store.removed, self._bumped = set(), {}, []

        def version(obj: dict) -> int:
            rv = str(obj["metadata"].get("resourceVersion") or "")
            return int(rv) if rv.isdigit() else 0

        def fresh(obj: dict) -> int:
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            return self._rv

        changed, gone, recreated = [], [], []
        for key in keys:
            cur, last = store.get(key), self._watch_last.get(key)
            if last is not None and (
                cur is None or cur["metadata"].get("uid") != last["metadata"].get("uid")
            ):
                gone.append((key, last))
                if cur is not None:  # removed and created again under its name: DELETED, then ADDED
                    recreated.append((key, cur))
                continue
            if cur is not None and (last is None or version(last) != version(cur)):
                changed.append((version(cur), key, cur, last))
        floor = self._history_rvs[-1] if self._history_rvs else self._history_start
        # Objects written into the store without a new version (a test's or a benchmark's setup) get
        # one after the others.
        changed.sort(key=lambda c: (c[0] <= floor, c[0]))
        for rv, key, cur, last in changed:
            if rv <= floor:
                fresh(cur)
            self._record(key, "MODIFIED" if last is not None else "ADDED", copy.deepcopy(cur), last)
        for key, last in sorted(gone):
            final = removed.get(key)
            final = copy.deepcopy(
                final
                if final is not None and final["metadata"].get("uid") == last["metadata"].get("uid")
                else last
            )
            fresh(final)
            self._record(key, "DELETED", final, last)
        for key, cur in sorted(recreated, key=lambda kc: kc[0]):
            fresh(cur)  # the new object's version comes after its predecessor's deletion
            self._record(key, "ADDED", copy.deepcopy(cur), None)

    def _watch_matches(self, watch: _WatchStream, obj: dict | None) -> bool:
        return (
            obj is not None
            and labels_match(obj["metadata"].get("labels") or {}, watch.reqs)
            and _field_match(obj, watch.fsel)
        )

    @staticmethod
    def _wire(obj: dict, rv: int | None = None) -> dict:
        out = copy.deepcopy(obj)
        if rv is not None:
            out["metadata"]["resourceVersion"] = str(rv)
        return out

    def _watch_open(self, res: Resource, ns: str, query: dict) -> _WatchStream:
        """Validate a watch request and fix where it starts (Kubernetes API concepts, "Semantics for
        watch"): ``resourceVersion`` unset ("Get State and Start at Most Recent") or "0" ("Start at
        Any"; the most recent here) send synthetic ADDED events for the objects at the current
        version first; a version N ("Start at Exact") every change after N, or 410 Expired when N
        is older than the history kept (storage/cacher/watch_cache.go: "too old resource version")."""
        if query.get("sendInitialEvents"):
            raise ApiError(400, "BadRequest", "sendInitialEvents is not implemented by the fake API server")
        reqs = parse_label_selector(query.get("labelSelector", [""])[0])
        fsel = query.get("fieldSelector", [""])[0]
        _field_match({"metadata": {}}, fsel)  # a malformed field selector is a 400 now
        raw_timeout = query.get("timeoutSeconds", [""])[0]
        try:
            timeout = float(int(raw_timeout)) if raw_timeout else self.watch_default_timeout
        except ValueError:
            raise ApiError(400, "BadRequest", f"timeoutSeconds: Invalid value: {raw_timeout!r}") from None
        bookmarks = query.get("allowWatchBookmarks", ["false"])[0] in ("1", "true")
        requested = query.get("resourceVersion", [""])[0]
        if requested and not requested.isdigit():
            raise ApiError(400, "BadRequest", f"resourceVersion: Invalid value: {requested!r}")
        self._watch_flush()
        now = time.monotonic()
        watch = _WatchStream(res, ns, reqs, fsel, self._rv, [], now + timeout, bookmarks)
        if bookmarks:
            watch.next_bookmark = next_bookmark_time(now, watch.deadline, self.bookmark_frequency_s)
        if requested in ("", "0"):
            watch.initial = [
                self._wire(o)
                for (p, ons, _), o in sorted(self._store.items())
                if p == res.plural and (not ns or ons == ns) and self._watch_matches(watch, o)
            ]
        elif int(requested) < self._history_start:
            watch.error = self._expired(int(requested))
        elif int(requested) > self._rv:
            # storage/cacher: a version the server has not reached yet (it waits 3 s, then gives up).
            watch.error = ApiError(
                504, "Timeout", f"Too large resource version: {requested}, current: {self._rv}"
            ).status()
        else:
            watch.cursor = int(requested)
        return watch

    def _header_delay(self, method: str, path: str) -> float:
        """``header_delay_s`` for a list or a watch (a GET on a collection), else 0."""
        if method != "GET" or not self.header_delay_s:
            return 0.0
        m = _PATH_RE.match(path)
        collection = m is not None and m.group("name") is None and m.group("plural") in RESOURCES
        return self.header_delay_s if collection else 0.0

    def _expired(self, rv: int) -> dict:
        return ApiError(410, "Expired", f"too old resource version: {rv} ({self._history_start})").status()

    def _watch_next(self, watch: _WatchStream) -> tuple[list[dict], dict | None]:
        """The events of ``watch`` after its cursor, filtered as the cacher does
        (storage/cacher/cache_watcher.go convertToWatchEvent): the object matching now and before
        → MODIFIED; now only → ADDED; before only → DELETED (the previous state, at the event's
        version). A cursor that fell out of the history (compacted) → a 410 ERROR."""
        import bisect

        with self._lock:
            self._watch_flush()
            if watch.cursor < self._history_start:
                return [], self._expired(watch.cursor)
            events = []
            start = bisect.bisect_right(self._history_rvs, watch.cursor)
            for rv, plural, ns, type_, obj, prev in self._history[start:]:
                watch.cursor = rv
                if plural != watch.res.plural or (watch.ns and ns != watch.ns):
                    continue
                now = type_ != "DELETED" and self._watch_matches(watch, obj)
                before = self._watch_matches(watch, prev)
                if now:
                    events.append({"type": "MODIFIED" if before else "ADDED", "object": self._wire(obj)})
                elif before:
                    events.append({"type": "DELETED", "object": self._wire(prev, rv)})
            watch.cursor = self._rv  # every change up to now is in the history (just flushed)
            return events, None

    def _bookmark(self, watch: _WatchStream) -> dict:
        """A BOOKMARK: only the kind and ``metadata.resourceVersion`` (the version up to which every
        change was sent) are meaningful (api-concepts, "Watch bookmarks")."""
        return {
            "type": "BOOKMARK",
            "object": {
                "kind": watch.res.kind,
                "apiVersion": watch.res.api_version,
                "metadata": {"resourceVersion": str(watch.cursor)},
            },
        }
