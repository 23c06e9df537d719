"""The dashboard's files on a real broker's HTTP port: what is served, with which headers, and what is not.

One broker subprocess with `--http-port`; requests over real HTTP with http.client,
so these hold what a browser gets: the page, each module it imports (followed from
the served files themselves, so a module missing from the package fails here), the
security headers, revalidation by ETag, and 404s for every path outside the files.
"""

from __future__ import annotations

import http.client
import re
from typing import Iterator

import pytest

from kittiwake.observe.pages import load_static
from support.broker_process import BrokerProcess

IMPORT = re.compile(r"""^\s*import\s[^;]*?from\s+"\./([^"]+)";""", re.MULTILINE)
ASSET = re.compile(r"""(?:src|href)="/static/([^"]+)\"""")


def get(broker: BrokerProcess, path: str, method: str = "GET", headers: dict[str, str] | None = None,
        ) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(broker.host, broker.http_port, timeout=10)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("pages") / "data", extra_args=["--http-port", "0"]) as process:
        yield process


def test_the_page_and_everything_it_loads_are_served_with_their_types(broker: BrokerProcess) -> None:
    status, headers, body = get(broker, "/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    page = body.decode()
    assets = ASSET.findall(page)
    assert {"app.js", "style.css", "icon.svg"} <= set(assets)
    types = {"js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8", "svg": "image/svg+xml"}
    seen: set[str] = set()
    pending = list(assets)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        status, headers, body = get(broker, f"/static/{name}")
        assert status == 200, f"/static/{name} answered {status}"
        assert headers["content-type"] == types[name.rsplit(".", 1)[1]]
        if name.endswith(".js"):
            pending += IMPORT.findall(body.decode())
    assert seen == set(load_static()) - {"index.html"}, "every shipped file is used and every used file shipped"


def test_every_answer_carries_a_strict_content_security_policy(broker: BrokerProcess) -> None:
    for path in ("/", "/static/app.js", "/static/style.css"):
        _, headers, _ = get(broker, path)
        policy = headers["content-security-policy"]
        assert "default-src 'self'" in policy and "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert "frame-ancestors 'none'" in policy
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"


def test_a_browser_revalidates_and_gets_304_while_nothing_changed(broker: BrokerProcess) -> None:
    _, headers, body = get(broker, "/static/app.js")
    assert headers["cache-control"] == "no-cache" and body
    etag = headers["etag"]
    status, again, body = get(broker, "/static/app.js", headers={"If-None-Match": etag})
    assert status == 304 and body == b"" and again["etag"] == etag
    status, _, body = get(broker, "/static/app.js", headers={"If-None-Match": '"something-else"'})
    assert status == 200 and body


@pytest.mark.parametrize("path", [
    "/static/",
    "/static/../pages.py",
    "/static/%2e%2e/pages.py",
    "/static/..%2fpages.py",
    "/static//etc/passwd",
    "/static/pages.py",
    "/static/__init__.py",
    "/static/APP.JS",
    "/static/app.js/",
    "/index.html",
    "/nowhere",
])
def test_only_the_shipped_files_are_served(broker: BrokerProcess, path: str) -> None:
    status, headers, _ = get(broker, path)
    assert status == 404
    assert headers["content-type"].startswith("text/plain")


def test_the_page_takes_only_get(broker: BrokerProcess) -> None:
    status, headers, _ = get(broker, "/", method="POST")
    assert status == 405 and headers["allow"] == "GET"
    assert get(broker, "/static/app.js", method="DELETE")[0] == 405
