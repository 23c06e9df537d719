"""Requests to a broker's HTTP port (`--http-port`) over real HTTP with http.client.

`call(broker, method, path, body, headers)` → (status, headers lower-cased,
answer): the answer is the decoded JSON when the response is JSON, else the
raw bytes; a body that is not bytes is sent as JSON. `get(broker, path)` is a
GET that must answer 200. `basic(user, token)` is an Authorization header.
"""

from __future__ import annotations

import base64
import http.client
import json
from typing import Any


def call(broker: Any, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
         ) -> tuple[int, dict[str, str], Any]:
    connection = http.client.HTTPConnection(broker.host, broker.http_port, timeout=10)
    try:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        sent = dict(headers or {})
        if body is not None and "Content-Type" not in sent:
            sent["Content-Type"] = "application/json"
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        raw = response.read()
        answer = json.loads(raw) if response.getheader("content-type", "").startswith("application/json") else raw
        return response.status, {k.lower(): v for k, v in response.getheaders()}, answer
    finally:
        connection.close()


def get(broker: Any, path: str, headers: dict[str, str] | None = None) -> Any:
    status, _, answer = call(broker, "GET", path, headers=headers)
    assert status == 200, (path, status, answer)
    return answer


def post(broker: Any, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    status, _, answer = call(broker, "POST", path, body, headers)
    return status, answer


def basic(user: str, token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


def error_code(answer: Any) -> str | None:
    return answer.get("error", {}).get("code") if isinstance(answer, dict) else None
