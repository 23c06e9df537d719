"""The HTTP port's JSON API plumbing on a real broker: who may ask, how, and what errors look like.

A broker subprocess with `--http-port` (and an auth file where it matters);
requests over real HTTP with http.client. The routes used are the API's own
index (`GET /api/`) and the session routes, so these tests hold whatever
views are registered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from kittiwake.cli.auth_command import auth
from support.auth_users import ALICE, ROOT, standard_auth_file
from support.broker_process import BrokerProcess
from support.http_api import basic, call


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("open") / "data", extra_args=["--http-port", "0"]) as broker:
        yield broker


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    directory = tmp_path_factory.mktemp("auth")
    users = standard_auth_file(directory / "users.json")
    with BrokerProcess(directory / "data", extra_args=["--http-port", "0"], auth_file=users) as broker:
        yield broker, users


def test_without_an_auth_file_everybody_is_let_in(open_broker: BrokerProcess) -> None:
    status, _, answer = call(open_broker, "GET", "/api/")
    assert status == 200 and "/api/session" in answer["paths"]
    assert call(open_broker, "GET", "/api/session")[2] == {"auth": False, "user": None}
    assert call(open_broker, "POST", "/api/session", {"user": "x", "token": "y"})[2] == {"auth": False, "user": None}
    status, headers, _ = call(open_broker, "GET", "/healthz")
    assert status == 200 and headers["content-type"].startswith("text/plain")


def test_errors_have_a_code_and_a_status(open_broker: BrokerProcess) -> None:
    status, _, answer = call(open_broker, "GET", "/api/no-such-view")
    assert status == 404 and answer["error"]["code"] == "NOT_FOUND"
    status, headers, answer = call(open_broker, "PUT", "/api/session")
    assert status == 405 and answer["error"]["code"] == "METHOD_NOT_ALLOWED" and "GET" in headers["allow"]
    status, headers, answer = call(open_broker, "POST", "/api/")
    assert status == 405 and headers["allow"] == "GET"
    status, _, answer = call(open_broker, "GET", "/api/?" + "&".join(f"k{i}=v" for i in range(100)))
    assert status == 400 and answer["error"]["code"] == "BAD_REQUEST"
    assert call(open_broker, "GET", "/nowhere")[0] == 404


def test_credentials_by_header_and_their_refusals(auth_broker: tuple[BrokerProcess, Path]) -> None:
    broker, _ = auth_broker
    status, headers, answer = call(broker, "GET", "/api/")
    assert status == 401 and answer["error"]["code"] == "UNAUTHORIZED"
    assert "www-authenticate" not in headers  # the page shows its own login form, not the browser's dialog
    assert call(broker, "GET", "/api/", headers=basic(*ROOT))[0] == 200
    assert call(broker, "GET", "/api/", headers={"Authorization": f"Bearer {ALICE[0]}:{ALICE[1]}"})[0] == 200
    for headers in (basic(ROOT[0], "wrong-token-0123456789"), {"Authorization": "Basic !!!"},
                    {"Authorization": "Bearer no-colon"}, {"Authorization": "Digest x"}):
        status, _, answer = call(broker, "GET", "/api/", headers=headers)
        assert status == 401 and answer["error"]["code"] == "UNAUTHORIZED", headers
    assert call(broker, "GET", "/healthz")[0] == 200  # needs no credentials


def test_a_session_cookie_from_a_login_and_its_end(auth_broker: tuple[BrokerProcess, Path]) -> None:
    broker, _ = auth_broker
    status, _, answer = call(broker, "POST", "/api/session", {"user": ROOT[0], "token": "wrong-token-0123456789"})
    assert status == 401
    status, headers, answer = call(broker, "POST", "/api/session", {"user": ROOT[0], "token": ROOT[1]})
    assert status == 200 and answer == {"auth": True, "user": "root"}
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    session = {"Cookie": cookie.split(";")[0]}
    assert call(broker, "GET", "/api/", headers=session)[0] == 200
    assert call(broker, "GET", "/api/session", headers=session)[2] == {"auth": True, "user": "root"}
    assert call(broker, "GET", "/api/session")[2] == {"auth": True, "user": None}
    assert call(broker, "GET", "/api/", headers={"Cookie": "kw_session=forged"})[0] == 401
    status, headers, _ = call(broker, "DELETE", "/api/session", headers=session)
    assert status == 200 and "Max-Age=0" in headers["set-cookie"]
    assert call(broker, "GET", "/api/", headers=session)[0] == 401


def test_writes_need_json_from_this_site(auth_broker: tuple[BrokerProcess, Path]) -> None:
    broker, _ = auth_broker
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    status, _, answer = call(broker, "POST", "/api/session", b"user=root&token=x", form)
    assert status == 400 and "Content-Type" in answer["error"]["message"]
    status, _, answer = call(broker, "POST", "/api/session", {"user": ROOT[0], "token": ROOT[1]},
                             {"Content-Type": "application/json", "Origin": "http://evil.example"})
    assert status == 403 and answer["error"]["code"] == "FORBIDDEN"
    origin = f"http://{broker.host}:{broker.http_port}"
    status, _, _ = call(broker, "POST", "/api/session", {"user": ROOT[0], "token": ROOT[1]},
                        {"Content-Type": "application/json", "Origin": origin})
    assert status == 200
    for bad in (b"not json", b"[1, 2]"):
        status, _, answer = call(broker, "POST", "/api/session", bad)
        assert status == 400 and answer["error"]["code"] == "BAD_REQUEST"


def test_a_new_token_ends_the_users_sessions(tmp_path: Path) -> None:
    users = standard_auth_file(tmp_path / "users.json")
    with BrokerProcess(tmp_path / "data", extra_args=["--http-port", "0"], auth_file=users) as broker:
        _, headers, _ = call(broker, "POST", "/api/session", {"user": ALICE[0], "token": ALICE[1]})
        session = {"Cookie": headers["set-cookie"].split(";")[0]}
        assert call(broker, "GET", "/api/", headers=session)[0] == 200
        result = CliRunner().invoke(auth, ["new-token", "--file", str(users), ALICE[0]])
        assert result.exit_code == 0, result.output
        status, _, answer = call(broker, "GET", "/api/", headers=session)  # the file is re-read within a second
        for _ in range(30):
            if status == 401:
                break
            import time

            time.sleep(0.1)
            status, _, answer = call(broker, "GET", "/api/", headers=session)
        assert status == 401 and "session ended" in answer["error"]["message"]
