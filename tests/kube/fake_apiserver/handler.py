"""The HTTP request handler: reads a request, hands it to the server, writes the answer."""

from __future__ import annotations

import json
import select
import socket
import struct
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from tests.kube.fake_apiserver.resources import ApiError
from tests.kube.fake_apiserver.store import _WatchStream, next_bookmark_time

if TYPE_CHECKING:
    from tests.kube.fake_apiserver.server import FakeApiServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: FakeApiServer

    def log_message(self, format, *args):  # noqa: A002 - silence the default stderr log
        pass

    def _dispatch(self):
        srv = self.server
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        srv.requests.append((self.command, url.path))
        entry = {"method": self.command, "path": url.path, "query": parse_qs(url.query), "objects": 0}
        # When the request came, its headers were sent and it ended (time.monotonic()).
        entry["started"] = time.monotonic()
        srv.request_log.append(entry)
        fault = srv._take_fault(self.command, url.path)
        if fault == "reset":
            # Abort the connection with an RST, before anything was processed or answered.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if isinstance(fault, int):
            err = ApiError(
                fault,
                "InternalError"
                if fault >= 500
                else {409: "Conflict", 429: "TooManyRequests"}.get(fault, "BadRequest"),
                f"injected fault {fault} on {url.path}",
            )
            self._send(fault, err.status())
            return
        headers: dict[str, str] = {}
        delay = srv._header_delay(self.command, url.path)
        if delay:
            time.sleep(delay)  # queued (API Priority and Fairness) or a lagging watch cache; no lock held
        try:
            answer = srv._handle(
                self.command, url.path, parse_qs(url.query), raw, self.headers.get("Content-Type", "")
            )
            code, body = answer[0], answer[1]
            if len(answer) > 2:
                headers = answer[2]
        except ApiError as e:
            code, body = e.code, e.status()
        except Exception as e:  # pragma: no cover - a bug in the fake server
            code, body = 500, ApiError(500, "InternalError", f"fake API server error: {e!r}").status()
        with srv._lock:
            srv._watch_flush()  # a write's events are recorded before the next request is read
        if fault == "timeout":
            # The request took effect; the answer comes too late for the client.
            time.sleep(srv.timeout_delay)
        if isinstance(body, _WatchStream):
            self._stream_watch(body, entry)
            return
        if isinstance(body, dict) and isinstance(body.get("items"), list):
            entry["objects"] = len(body["items"])
        entry["answered"] = time.monotonic()
        self._send(code, body, headers)
        entry["ended"] = time.monotonic()

    def _stream_watch(self, watch: _WatchStream, entry: dict) -> None:
        """Send a watch's events as chunks (RFC 9112 chunked transfer coding), one JSON line each,
        until ``timeoutSeconds``, the client going away or the server stopping."""
        srv = self.server
        self.protocol_version = "HTTP/1.1"  # chunked transfer coding is HTTP/1.1
        self.close_connection = True

        def chunk(events: list[dict]) -> None:
            data = b"".join(json.dumps(e).encode() + b"\n" for e in events)
            entry["objects"] += len(events)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def client_gone(wait: float) -> bool:
            readable, _, _ = select.select([self.connection], [], [], wait)
            return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)

        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            entry["answered"] = time.monotonic()
            if watch.error is not None:
                chunk([{"type": "ERROR", "object": watch.error}])
            else:
                if watch.initial:
                    chunk([{"type": "ADDED", "object": o} for o in watch.initial])
                    watch.initial = []
                # No bookmark after the replay, none at the deadline: only on the watch cache's
                # schedule (next_bookmark_time).
                while True:
                    events, error = srv._watch_next(watch)
                    if error is not None:
                        chunk([{"type": "ERROR", "object": error}])
                        break
                    now = time.monotonic()
                    if watch.next_bookmark is not None and now >= watch.next_bookmark:
                        events.append(srv._bookmark(watch))
                        watch.next_bookmark = next_bookmark_time(
                            now, watch.deadline, srv.bookmark_frequency_s
                        )
                    if events:
                        chunk(events)
                    if now >= watch.deadline or srv._stopping:
                        break
                    wake = min(watch.deadline, watch.next_bookmark or watch.deadline)
                    if client_gone(min(srv.watch_poll_s, max(0.0, wake - time.monotonic()))):
                        return  # it stopped watching
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass  # the client went away (it stopped watching)
        finally:
            entry["ended"] = time.monotonic()

    def _send(self, code: int, body: dict | bytes, headers: dict | None = None):
        # A pod log is text/plain (bytes); everything else a JSON object.
        raw = isinstance(body, bytes)
        data = body if raw else json.dumps(body).encode()
        try:
            self.send_response(code)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "text/plain" if raw else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client went away (timeout)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch
