"""The dashboard page on the HTTP port: `/` and `/static/<file>`, files shipped inside the package.

The page is one HTML file, its JavaScript modules and one style sheet in
`kittiwake/observe/static/`: no build step, nothing fetched from elsewhere.
`Pages` reads them once when the broker starts and answers from memory:

* only names that are files of that directory are served (a lookup in a map
  of names, so `..`, slashes and escapes never reach the file system);
* each type has its content type; `Cache-Control: no-cache` with an ETag, so
  a browser revalidates (304 when nothing changed) and never runs a stale
  script after an upgrade;
* every answer carries a Content-Security-Policy of `default-src 'self'`
  (no inline script or style, no other origin: what the page shows cannot
  turn into code), `nosniff`, no referrer and no framing.

`/` is the longest-prefix fallback of the port's routes, so any path no
other face takes ends here: it is a 404, as before the page existed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from kittiwake.broker.http_server import HttpRequest, HttpResponse, text_response

STATIC_PREFIX = "/static/"
INDEX = "index.html"
NAME = re.compile(r"[a-z0-9][a-z0-9_-]*\.(html|js|css|svg)")
CONTENT_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"
)
SECURITY_HEADERS = [
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
]


@dataclass(frozen=True, slots=True)
class StaticFile:
    body: bytes
    content_type: str
    etag: str


def load_static() -> dict[str, StaticFile]:
    """Every servable file of the package's `static` directory, by name."""
    files: dict[str, StaticFile] = {}
    for entry in resources.files("kittiwake.observe").joinpath("static").iterdir():
        match = NAME.fullmatch(entry.name)
        if match is None or not entry.is_file():
            continue
        body = entry.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        files[entry.name] = StaticFile(body, CONTENT_TYPES[match.group(1)], etag)
    if INDEX not in files:
        raise RuntimeError(f"the dashboard's {INDEX} is missing from kittiwake/observe/static")
    return files


class Pages:
    """The dashboard's files, answered from memory."""

    def __init__(self, files: dict[str, StaticFile] | None = None) -> None:
        self.files = load_static() if files is None else files

    async def handle(self, request: HttpRequest) -> HttpResponse:
        if request.path == "/":
            name = INDEX
        elif request.path.startswith(STATIC_PREFIX):
            name = request.path[len(STATIC_PREFIX):]
        else:
            return text_response(404, f"no such path: {request.path[:200]}")
        found = self.files.get(name)
        if found is None:
            return text_response(404, f"no such file: {request.path[:200]}")
        if request.method != "GET":
            response = text_response(405, f"{request.path[:200]} takes GET")
            response.headers.append(("allow", "GET"))
            return response
        headers = [("cache-control", "no-cache"), ("etag", found.etag), *SECURITY_HEADERS]
        if _matches(request.headers.get("if-none-match"), found.etag):
            return HttpResponse(304, b"", found.content_type, headers)
        return HttpResponse(200, found.body, found.content_type, headers)


def _matches(if_none_match: str | None, etag: str) -> bool:
    if if_none_match is None:
        return False
    tags = [tag.strip().removeprefix("W/") for tag in if_none_match.split(",")]
    return "*" in tags or etag in tags
