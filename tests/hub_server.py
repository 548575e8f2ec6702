"""A local stand-in for the Hugging Face Hub's file API, for the tests that fetch a module set by
its repository id (point HF_ENDPOINT at ``FakeHub.url``). It answers what ``huggingface_hub``
asks of a model repository:

    GET  /api/models/{repo}[/revision/{rev}]   the repository and its files (sizes, LFS SHA-256)
    HEAD /{repo}/resolve/{rev}/{path}          X-Repo-Commit, ETag, Content-Length of one file
    GET  /{repo}/resolve/{rev}/{path}          the file, or from a ``Range: bytes=N-`` offset (206)

and the hub's errors (404 with X-Error-Code RepoNotFound, RevisionNotFound or EntryNotFound).
Each request is logged (method, path, Range). ``cut`` makes the next GET of a file stop half way;
``serve_instead`` serves other bytes than the listing describes (a damaged transfer).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"

    def sha256(self, path: str) -> str:
        return hashlib.sha256(self.files[path]).hexdigest()


@dataclass
class FakeHub:
    repos: dict[str, Repo]
    log: list[tuple[str, str, str | None]] = field(default_factory=list)
    cut: set[tuple[str, str]] = field(default_factory=set)  # (repo, path): the next GET stops half way
    serve_instead: dict[tuple[str, str], bytes] = field(default_factory=dict)
    _open: set = field(default_factory=set)  # connections being served (keep-alive ones stay open)

    def start(self, port: int = 0) -> FakeHub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops listening and cuts every open connection: a client's pooled keep-alive
        connection must not outlive the server."""
        self._server.shutdown()
        self._server.server_close()
        for conn in list(self._open):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join()

    def gets(self) -> list[str]:
        """Paths of the files whose bytes were sent (GET on resolve URLs)."""
        return [m["path"] for m in map(_RESOLVE.match, (p for verb, p, _ in self.log if verb == "GET")) if m]


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        self.hub._open.add(self.connection)

    def finish(self):
        self.hub._open.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def _error(self, status: int, code: str, commit: str | None = None) -> None:
        body = json.dumps({"error": code}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, data) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _repo(self, name: str, rev: str | None) -> Repo | None:
        repo = self.hub.repos.get(name)
        if repo is None:
            self._error(404, "RepoNotFound")
            return None
        if rev not in (None, "main", repo.commit):
            self._error(404, "RevisionNotFound")
            return None
        return repo

    def do_HEAD(self):
        self._serve()

    def do_GET(self):
        self._serve()

    def _serve(self):
        path = unquote(urlsplit(self.path).path)
        self.hub.log.append((self.command, path, self.headers.get("Range")))
        info, resolve = _INFO.match(path), _RESOLVE.match(path)
        if info and self.command == "GET":
            repo = self._repo(info["repo"], info["rev"])
            if repo is not None:
                self._json(_model_info(info["repo"], repo))
        elif resolve:
            repo = self._repo(resolve["repo"], resolve["rev"])
            if repo is not None:
                self._file(resolve["repo"], repo, resolve["path"])
        else:
            self._error(404, "NotFound")

    def _file(self, name: str, repo: Repo, path: str) -> None:
        if path not in repo.files:
            self._error(404, "EntryNotFound", repo.commit)
            return
        data = self.hub.serve_instead.get((name, path), repo.files[path])
        start, status = 0, 200
        m = _RANGE.match(self.headers.get("Range") or "")
        if m and self.command == "GET":
            start, status = int(m[1]), 206
        self.send_response(status)
        self.send_header("X-Repo-Commit", repo.commit)
        self.send_header("ETag", f'"{repo.sha256(path)}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(data) - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if self.command == "HEAD":
            return
        body = data[start:]
        if (name, path) in self.hub.cut:
            self.hub.cut.discard((name, path))
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


def _model_info(name: str, repo: Repo) -> dict:
    return {
        "id": name,
        "modelId": name,
        "sha": repo.commit,
        "private": False,
        "siblings": [
            {
                "rfilename": path,
                "size": len(data),
                "blobId": hashlib.sha1(data).hexdigest(),
                "lfs": {"size": len(data), "sha256": repo.sha256(path), "pointerSize": 134},
            }
            for path, data in sorted(repo.files.items())
        ],
    }
