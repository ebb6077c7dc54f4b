"""Real servers on loopback for the remote-corpus tests.

- :func:`moto_s3`: moto's S3 server in a thread (``ThreadedMotoServer``) on a free
  port of 127.0.0.1, with dummy credentials in the environment, read through s3fs.
- :class:`CorpusHTTPServer`: ``http.server`` serving a directory with HTTP Range
  support (``206 Partial Content``), per-path request/byte counters, and fault
  injection: answer 503, reset the connection, truncate or corrupt the body for
  the next ``k`` matching requests.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

FAULT_KINDS = ("503", "reset", "truncate", "corrupt", "short")


@dataclass
class Fault:
    kind: str
    remaining: int
    match: str = ""
    methods: tuple[str, ...] = ("GET",)


@dataclass
class ServerState:
    root: str
    faults: list[Fault] = field(default_factory=list)
    gets: Counter[str] = field(default_factory=Counter)
    heads: Counter[str] = field(default_factory=Counter)
    full_gets: Counter[str] = field(default_factory=Counter)  # GETs without a Range header
    bytes_sent: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # When set to an unset Event, whole-file GETs wait for it (tests hold downloads),
    # those whose path contains ``hold_match`` only.
    hold: threading.Event | None = None
    hold_match: str = ""

    def take_fault(self, method: str, path: str) -> str | None:
        with self.lock:
            for fault in self.faults:
                if fault.remaining > 0 and method in fault.methods and fault.match in path:
                    fault.remaining -= 1
                    self.injected[fault.kind] += 1
                    return fault.kind
        return None

    def reset_counters(self) -> None:
        with self.lock:
            self.gets.clear()
            self.heads.clear()
            self.bytes_sent.clear()
            self.injected.clear()
            self.faults.clear()


_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class _Handler(http.server.BaseHTTPRequestHandler):
    server_version = "mixle-test/1"
    state: ServerState  # set on the subclass per server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _file(self) -> str | None:
        relative = self.path.split("?", 1)[0].lstrip("/")
        path = os.path.normpath(os.path.join(self.state.root, relative))
        if not path.startswith(self.state.root) or not os.path.isfile(path):
            return None
        return path

    def _reset(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.close()

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        relative = self.path.split("?", 1)[0].lstrip("/")
        with self.state.lock:
            (self.state.heads if head else self.state.gets)[relative] += 1
            if not head and not self.headers.get("Range"):
                self.state.full_gets[relative] += 1
        hold = self.state.hold
        held = hold is not None and self.state.hold_match in relative
        if held and not head and not self.headers.get("Range"):
            assert hold is not None
            hold.wait()
        fault = self.state.take_fault("HEAD" if head else "GET", relative)
        if fault == "503":
            self.send_response(503, "Slow Down")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if fault == "reset":
            self._reset()
            return
        path = self._file()
        if path is None:
            self.send_error(404)
            return
        with open(path, "rb") as handle:
            data = handle.read()
        size = len(data)
        start, end = 0, size
        status = 200
        header = self.headers.get("Range")
        if header:
            found = _RANGE.match(header.strip())
            if found is None:
                self.send_error(416)
                return
            first, last = found.groups()
            if first == "":
                start, end = max(0, size - int(last)), size
            else:
                start = int(first)
                end = size if last == "" else min(size, int(last) + 1)
            if start >= size and size > 0:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        body = data[start:end]
        if fault == "corrupt" and body:
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        if fault == "short":  # a consistent but short response (lying Content-Length)
            body = body[: len(body) // 2]
        self.send_response(status)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{max(start, end - 1)}/{size}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        if fault == "truncate":  # promise the whole body, send half, hang up
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self._reset()
            return
        with self.state.lock:  # count before sending: the client may look right after
            self.state.bytes_sent[relative] += len(body)
        self.wfile.write(body)


class _Server(http.server.ThreadingHTTPServer):
    # The default backlog of 5 drops concurrent connections (1 s SYN retransmits).
    request_queue_size = 256


class CorpusHTTPServer:
    """A threaded HTTP server for ``root`` on 127.0.0.1 (free port); a context manager."""

    def __init__(self, root: str) -> None:
        self.state = ServerState(os.path.abspath(root))
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.httpd = _Server(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def fail(
        self, kind: str, times: int, match: str = "", methods: tuple[str, ...] = ("GET",)
    ) -> None:
        """Inject ``kind`` into the next ``times`` requests whose path contains ``match``."""
        assert kind in FAULT_KINDS
        with self.state.lock:
            self.state.faults.append(Fault(kind, times, match, methods))

    def __enter__(self) -> CorpusHTTPServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def moto_s3() -> Iterator[dict[str, Any]]:
    """Start moto's S3 server on loopback; yield s3fs ``storage_options`` for it.

    Dummy credentials go into the environment (where botocore looks for them), not
    into the storage options: the code under test must take credentials from the
    usual configuration.
    """
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in _AWS_ENV}
    os.environ.update(_AWS_ENV)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield {"client_kwargs": {"endpoint_url": f"http://{host}:{port}"}}
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
