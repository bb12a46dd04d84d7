"""A stand-in for the Hugging Face Hub on 127.0.0.1: the URL layout and headers huggingface_hub's
real client uses (model info, tree listing, resolve with HEAD and ranged GET), serving repositories
held in memory. Point HF_ENDPOINT at `server.url`; nothing reaches the internet.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

LFS_FROM = 64  # files at least this large are served as LFS files (blob named by SHA-256)


@dataclass
class Repo:
    files: dict[str, bytes]
    gated: bool = False
    commit: str = ""
    branches: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        digest = hashlib.sha1(json.dumps(sorted(self.files)).encode()).hexdigest()
        self.commit = self.commit or digest
        self.branches.setdefault("main", self.commit)


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


_described: dict[tuple[str, int, int], dict] = {}


def describe(path: str, data: bytes) -> dict:
    """A file's tree entry (hashed once per file: benchmarks serve models of a gigabyte)."""
    key = (path, id(data), len(data))
    if key not in _described:
        _described[key] = _entry(path, data)
    return _described[key]


def _entry(path: str, data: bytes) -> dict:
    entry = {"type": "file", "path": path, "size": len(data), "oid": git_oid(data)}
    if len(data) >= LFS_FROM:
        entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                        "pointerSize": 130}
    return entry


class HubServer:
    """`with HubServer(repos, token="hf_x") as hub:` serves until the block ends."""

    def __init__(self, repos: dict[str, Repo], token: str | None = None) -> None:
        self.repos = repos
        self.token = token
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, authorization
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                self._answer(head=True)

            def do_GET(self) -> None:
                self._answer(head=False)

            def _answer(self, head: bool) -> None:
                hub.requests.append((self.command, self.path,
                                     self.headers.get("Authorization")))
                path = unquote(urlparse(self.path).path)
                if match := re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$", path):
                    return self._tree(match[1], match[2])
                if match := re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path):
                    return self._info(match[1], match[2] or "main")
                if match := re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path):
                    return self._resolve(match[1], match[2], match[3], head)
                self._error(404, "RepoNotFound", head)

            def _repo(self, name: str, revision: str, head: bool = False):
                repo = hub.repos.get(name)
                if repo is None:
                    self._error(404, "RepoNotFound", head)
                    return None, None
                commit = repo.branches.get(revision, revision if revision == repo.commit else None)
                if commit is None:
                    self._error(404, "RevisionNotFound", head)
                    return None, None
                return repo, commit

            def _info(self, name: str, revision: str) -> None:
                repo, commit = self._repo(name, revision)
                if repo is None:
                    return
                siblings = []
                for path, data in sorted(repo.files.items()):
                    entry = describe(path, data)
                    sibling = {"rfilename": path, "size": len(data), "blobId": entry["oid"]}
                    if "lfs" in entry:
                        sibling["lfs"] = {"sha256": entry["lfs"]["oid"], "size": len(data),
                                          "pointerSize": 130}
                    siblings.append(sibling)
                self._json({"id": name, "modelId": name, "sha": commit, "private": False,
                            "gated": "auto" if repo.gated else False, "siblings": siblings})

            def _tree(self, name: str, revision: str) -> None:
                repo, _ = self._repo(name, revision)
                if repo is not None:
                    self._json([describe(p, d) for p, d in sorted(repo.files.items())])

            def _resolve(self, name: str, revision: str, filename: str, head: bool) -> None:
                repo, commit = self._repo(name, revision, head)
                if repo is None:
                    return
                if repo.gated and self.headers.get("Authorization") != f"Bearer {hub.token}":
                    return self._error(401, "GatedRepo", head)
                data = repo.files.get(filename)
                if data is None:
                    return self._error(404, "EntryNotFound", head)
                entry = describe(filename, data)
                etag = entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]
                start = 0
                if match := re.match(r"bytes=(\d+)-", self.headers.get("Range", "")):
                    start = min(int(match[1]), len(data))
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", commit)
                self.send_header("ETag", f'"{etag}"')
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                if not head:
                    self.wfile.write(data[start:])

            def _json(self, value) -> None:
                body = json.dumps(value).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, status: int, code: str, head: bool) -> None:
                body = json.dumps({"error": code}).encode()
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

        return Handler
