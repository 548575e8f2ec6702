"""Local stand-ins for the model hubs' file APIs, for the tests that fetch a module set by its
repository id. ``FakeHub`` answers what ``huggingface_hub`` asks of a model repository (point
HF_ENDPOINT at ``url``):

    GET  /api/models/{repo}[/revision/{rev}]   the repository and its files (sizes, LFS SHA-256)
    HEAD /{repo}/resolve/{rev}/{path}          X-Repo-Commit, ETag, Content-Length of one file
    GET  /{repo}/resolve/{rev}/{path}          the file, or from a ``Range: bytes=N-`` offset (206)

with the Hub's errors (404 with X-Error-Code RepoNotFound, RevisionNotFound or EntryNotFound).
``FakeModelScope`` serves the same repositories as ModelScope's API does to ``modelscope``.

``log`` holds every request (method, path, Range) and ``fetched`` every file body sent (path in
the repository, Range). ``cut`` makes the next GET of a file stop half way; ``serve_instead``
serves other bytes than the listing describes (a damaged transfer).
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
from urllib.parse import parse_qs, unquote, urlsplit

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
    fetched: list[tuple[str, str | None]] = field(default_factory=list)
    cut: set[tuple[str, str]] = field(default_factory=set)  # (repo, path): the next GET stops half way
    serve_instead: dict[tuple[str, str], bytes] = field(default_factory=dict)
    _open: set = field(default_factory=set)  # connections being served (keep-alive ones stay open)

    def handler(self):
        return _HubHandler

    def start(self, port: int = 0):
        class Handler(self.handler()):
            hub = self

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
        """Paths of the files whose bytes were sent."""
        return [path for path, _ in self.fetched]


def serving(server: FakeHub, monkeypatch, **env: str):
    """A test fixture's body: starts ``server``, clears the hub switches of the environment, sets
    ``env`` (``{url}`` in a value becomes the server's address), yields the server, stops it."""
    server.start()
    for name in ("HF_HUB_OFFLINE", "HF_HOME", "OMNI_HUB"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(url=server.url))
    yield server
    server.stop()


class FakeModelScope(FakeHub):
    """The repositories as ModelScope's API serves them to ``modelscope``'s snapshot_download:

    GET /api/v1/models/{repo}                                  the repository
    GET /api/v1/models/{repo}/repo/files?Revision=&Recursive=  its files (Path, Size, Sha256)
    GET /api/v1/models/{repo}/repo?Revision=&FilePath=         one file (Range: bytes=N-)
    """

    def handler(self):
        return _ModelScopeHandler


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

    def do_HEAD(self):
        self._dispatch()

    def do_GET(self):
        self._dispatch()

    def _dispatch(self):
        url = urlsplit(self.path)
        self.hub.log.append((self.command, unquote(url.path), self.headers.get("Range")))
        self.route(unquote(url.path), {k: v[0] for k, v in parse_qs(url.query).items()})

    def route(self, path: str, query: dict[str, str]) -> None:
        raise NotImplementedError

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, data, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _file(self, name: str, repo: Repo, path: str, headers: dict[str, str]) -> None:
        """The bytes of ``path`` (from a Range offset: 206), as faults say."""
        data = self.hub.serve_instead.get((name, path), repo.files[path])
        start, status = 0, 200
        m = _RANGE.match(self.headers.get("Range") or "")
        if m and self.command == "GET":
            start, status = int(m[1]), 206
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(data) - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if self.command == "HEAD":
            return
        self.hub.fetched.append((path, self.headers.get("Range")))
        body = data[start:]
        if (name, path) in self.hub.cut:
            self.hub.cut.discard((name, path))
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


_HF_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")
_HF_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


class _HubHandler(_Handler):
    def _error(self, code: str, commit: str | None = None) -> None:
        self._json({"error": code}, 404, {"X-Error-Code": code, **({"X-Repo-Commit": commit} if commit else {})})

    def _repo(self, name: str, rev: str | None) -> Repo | None:
        repo = self.hub.repos.get(name)
        if repo is None:
            self._error("RepoNotFound")
        elif rev not in (None, "main", repo.commit):
            self._error("RevisionNotFound")
        else:
            return repo
        return None

    def route(self, path, query):
        info, resolve = _HF_INFO.match(path), _HF_RESOLVE.match(path)
        if info and self.command == "GET":
            repo = self._repo(info["repo"], info["rev"])
            if repo is not None:
                self._json(_hf_model_info(info["repo"], repo))
        elif resolve:
            repo = self._repo(resolve["repo"], resolve["rev"])
            if repo is None:
                return
            if resolve["path"] not in repo.files:
                self._error("EntryNotFound", repo.commit)
                return
            etag = f'"{repo.sha256(resolve["path"])}"'
            self._file(resolve["repo"], repo, resolve["path"], {"X-Repo-Commit": repo.commit, "ETag": etag})
        else:
            self._error("NotFound")


def _hf_model_info(name: str, repo: Repo) -> dict:
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


_MS_FILES = re.compile(r"^/api/v1/models/(?P<repo>[^/]+/[^/]+)/repo/files$")
_MS_FILE = re.compile(r"^/api/v1/models/(?P<repo>[^/]+/[^/]+)/repo$")
_MS_INFO = re.compile(r"^/api/v1/models/(?P<repo>[^/]+/[^/]+)$")


class _ModelScopeHandler(_Handler):
    def _envelope(self, data, status: int = 200, message: str = "") -> None:
        self._json({"Code": status, "Data": data, "Message": message, "Success": status == 200}, status)

    def route(self, path, query):
        for pattern in (_MS_FILES, _MS_FILE, _MS_INFO):
            m = pattern.match(path)
            if m:
                break
        else:
            self._envelope(None, 404, "not found")
            return
        repo = self.hub.repos.get(m["repo"])
        if repo is None:
            self._envelope(None, 404, f"model {m['repo']} not exists")
        elif query.get("Revision", "master") not in ("master", repo.commit):
            self._envelope(None, 404, f"revision {query['Revision']} not exists")
        elif pattern is _MS_INFO:
            owner, name = m["repo"].split("/")
            self._envelope({"Name": name, "Path": owner, "Revision": "master"})
        elif pattern is _MS_FILES:
            self._envelope({"Files": [_ms_file(path, repo) for path in sorted(repo.files)]})
        elif query.get("FilePath") not in repo.files:
            self._envelope(None, 404, f"file {query.get('FilePath')} not exists")
        else:
            self._file(m["repo"], repo, query["FilePath"], {"Content-Type": "application/octet-stream"})


def _ms_file(path: str, repo: Repo) -> dict:
    return {
        "Name": path.rsplit("/", 1)[-1],
        "Path": path,
        "Type": "blob",
        "Size": len(repo.files[path]),
        "Sha256": repo.sha256(path),
        "Revision": repo.commit,
    }
