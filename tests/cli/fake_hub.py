"""A local HTTP server that serves files the way the Hugging Face hub serves LFS files, for `pocket pull` tests
with HF_ENDPOINT pointing at it.

`HEAD|GET /{owner}/{repo}/resolve/{revision}/{path}` answers 302 with X-Repo-Commit, X-Linked-Etag (the sha256)
and X-Linked-Size, and a Location on another host name ("localhost" while the endpoint is "127.0.0.1"), as the
hub redirects to its CDN; unknown repos and files get 404 with the hub's X-Error-Code. `/cdn/{sha256}` serves the
bytes with Range support. Knobs: `drop_after` cuts the next CDN response after that many bytes (the client sees
a connection closed mid-body); `refuse_after_drop` answers 503 to CDN requests after a drop; `corrupt` serves
other bytes than the sha256 promises. `requests` records (method, path, Range header)."""
from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"
RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<path>.+)$")
RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class FakeHub:
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (repo, path) -> content
    drop_after: int | None = None
    refuse_after_drop: bool = False
    corrupt: bool = False
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    dropped: bool = False

    def add(self, repo: str, path: str, content: bytes) -> str:
        self.files[(repo, path)] = content
        return hashlib.sha256(content).hexdigest()

    def __enter__(self) -> FakeHub:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(self))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cdn_gets(self) -> list[str | None]:
        """The Range header of every GET of file bytes, in order."""
        return [range_ for method, path, range_ in self.requests if method == "GET" and path.startswith("/cdn/")]

    def blob(self, sha256: str) -> bytes | None:
        for content in self.files.values():
            if hashlib.sha256(content).hexdigest() == sha256:
                return content
        return None


def make_handler(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_HEAD(self) -> None:
            self.answer(send_body=False)

        def do_GET(self) -> None:
            self.answer(send_body=True)

        def answer(self, send_body: bool) -> None:
            hub.requests.append((self.command, self.path, self.headers.get("Range")))
            if self.path.startswith("/cdn/"):
                self.serve_blob(self.path.removeprefix("/cdn/").split("?")[0], send_body)
            elif match := RESOLVE.match(self.path):
                self.resolve(match["repo"], match["path"])
            else:
                self.empty(404, {"X-Error-Code": "RepoNotFound"})

        def resolve(self, repo: str, path: str) -> None:
            if not any(r == repo for r, _ in hub.files):
                self.empty(404, {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"})
                return
            content = hub.files.get((repo, path))
            if content is None:
                self.empty(404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
                return
            sha256 = hashlib.sha256(content).hexdigest()
            self.empty(302, {"Location": f"http://localhost:{hub.port}/cdn/{sha256}?signed=1",
                             "X-Repo-Commit": COMMIT, "X-Linked-Etag": f'"{sha256}"',
                             "X-Linked-Size": str(len(content)), "ETag": '"0000gitblob"'})

        def serve_blob(self, sha256: str, send_body: bool) -> None:
            content = hub.blob(sha256)
            if content is None:
                self.empty(404, {})
                return
            if send_body and hub.dropped and hub.refuse_after_drop:
                self.empty(503, {})
                return
            if hub.corrupt:
                content = bytes(b ^ 0xFF for b in content)
            start, status = self.range_start(len(content))
            body = content[start:]
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{sha256}"')
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}")
            self.end_headers()
            if send_body:
                self.send_body(body)

        def range_start(self, size: int) -> tuple[int, int]:
            match = RANGE.match(self.headers.get("Range") or "")
            if match and int(match[1]) < size:
                return int(match[1]), 206
            return 0, 200

        def send_body(self, body: bytes) -> None:
            if hub.drop_after is not None and not hub.dropped:
                hub.dropped = True
                self.wfile.write(body[:hub.drop_after])
                self.wfile.flush()
                self.close_connection = True  # the client sees the connection closed mid-body
                return
            self.wfile.write(body)

        def empty(self, status: int, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler
