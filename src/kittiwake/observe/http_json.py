"""The JSON API's plumbing on the HTTP port: who is asking, what they sent, what they get back.

`JsonApi` owns every path under `/api/`: a face registers a handler for an
exact path with `add(path, handler, write=...)`, and each request gets

* authentication (`HttpAuth`): with no auth file, everybody is let in (the
  principal is None, as on the TCP port); with one, a session cookie
  (`sessions`) or `Authorization: Basic base64(user:token)` /
  `Authorization: Bearer user:token`, checked by the broker's `Authenticator`
  (cached, rate-limited, off the event loop); no credentials → 401;
* the method: GET for reads; POST for writes (`write=True`), whose body must
  be a JSON object sent as `application/json` (which a cross-site form cannot
  send without the browser asking first) and whose Origin, when the browser
  gives one, must be this host (else 403): with the SameSite=Strict cookie,
  that is the defence against cross-site requests;
* the answer: the handler's result as JSON (`kittiwake.json_records`: task
  data as UTF-8 text or base64 with `data_encoding`), `Cache-Control:
  no-store`; a `KittiwakeError` as `{"error": {"code", "message"}}` with the
  status of `STATUS_OF` (400 otherwise); anything else is a 500 and a logged
  traceback (the HTTP server's promise).

The session routes live here too: `GET /api/session` (needs no credentials:
whether auth is on and who this cookie is), `POST /api/session` with
`{"user", "token"}` (sets the cookie), `DELETE /api/session` (logs out).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable
from urllib.parse import parse_qsl, urlsplit

import msgspec

from kittiwake import errors
from kittiwake.broker.access import Principal
from kittiwake.broker.http_server import HttpRequest, HttpResponse
from kittiwake.json_records import to_json_value
from kittiwake.observe import sessions
from kittiwake.observe.sessions import Sessions

if TYPE_CHECKING:
    from kittiwake.broker.faces import Host

JsonHandler = Callable[[HttpRequest, Principal | None], Awaitable[Any]]

JSON = "application/json"
MAX_QUERY_PARAMS = 64
STATUS_OF = {
    errors.Unauthorized.code: 401,
    errors.Forbidden.code: 403,
    errors.QueueNotFound.code: 404,
    errors.TaskNotFound.code: 404,
    errors.Unavailable.code: 503,
    errors.TooManyConnections.code: 503,
    errors.InternalError.code: 500,
}
NOT_LOGGED_IN = "log in: POST /api/session with user and token, or send Authorization: Basic base64(user:token)"


def query(request: HttpRequest) -> dict[str, str]:
    """The query string's parameters (the last value of a repeated one wins)."""
    try:
        pairs = parse_qsl(request.query, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_QUERY_PARAMS)
    except ValueError as exc:
        raise errors.BadRequest(f"bad query string: {exc}") from None
    return dict(pairs)


def body(request: HttpRequest) -> dict[str, Any]:
    """A write's body: a JSON object."""
    try:
        value = msgspec.json.decode(request.body) if request.body else None
    except msgspec.DecodeError as exc:
        raise errors.BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise errors.BadRequest("the body must be a JSON object")
    return value


def json_response(value: Any, status: int = 200, headers: list[tuple[str, str]] | None = None) -> HttpResponse:
    return HttpResponse(
        status,
        msgspec.json.encode(to_json_value(value)),
        JSON,
        [("cache-control", "no-store"), ("x-content-type-options", "nosniff"), *(headers or [])],
    )


def error_response(error: errors.KittiwakeError, headers: list[tuple[str, str]] | None = None) -> HttpResponse:
    return json_response(
        {"error": {"code": error.code, "message": error.message}},
        STATUS_OF.get(error.code, 400),
        headers,
    )


class HttpAuth:
    """Credentials of HTTP requests, checked against the broker's users."""

    def __init__(self, host: Host, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.clock = clock
        self.sessions = Sessions()

    @property
    def enabled(self) -> bool:
        return self.host.authenticator is not None

    async def principal(self, request: HttpRequest) -> Principal | None:
        """Who sent `request`: None when auth is off; raises `Unauthorized` without valid credentials."""
        authenticator = self.host.authenticator
        if authenticator is None:
            return None
        header = request.headers.get("authorization")
        if header is not None:
            user, token = _credentials(header)
            return _counted(request, await self.check(user, token, request.peer))
        session_id = sessions.cookie_of(request.headers.get("cookie"))
        if session_id is not None:
            session = self.sessions.find(session_id, self.clock())
            if session is not None:
                principal = authenticator.current(session.user, session.token_hash)
                if principal is not None:
                    return _counted(request, principal)
                self.sessions.close(session_id)
            raise errors.Unauthorized("the session ended: log in again")
        raise errors.Unauthorized(NOT_LOGGED_IN)

    async def check(self, user: object, token: object, peer: str | None) -> Principal:
        """The principal of these credentials (the Authenticator's checks, cache and budgets)."""
        authenticator = self.host.authenticator
        if authenticator is None:
            raise errors.BadRequest("this broker has no users: auth is off")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def done(outcome: Any) -> None:
            if not future.done():
                future.set_result(outcome)

        authenticator.authenticate(user, token, _source(peer), done)
        outcome = await future
        if isinstance(outcome, errors.KittiwakeError):
            raise outcome
        return outcome

    async def login(self, request: HttpRequest) -> HttpResponse:
        fields = body(request)
        user, token = fields.get("user"), fields.get("token")
        principal = await self.check(user, token, request.peer)
        authenticator = self.host.authenticator
        token_hash = authenticator.token_hash_of(principal.user) if authenticator is not None else None
        if token_hash is None:
            raise errors.Unauthorized("the user is gone")
        session_id = self.sessions.open(principal.user, token_hash, self.clock())
        return json_response({"auth": True, "user": principal.user}, 200, [("set-cookie", sessions.set_cookie(session_id))])

    def logout(self, request: HttpRequest) -> HttpResponse:
        session_id = sessions.cookie_of(request.headers.get("cookie"))
        if session_id is not None:
            self.sessions.close(session_id)
        return json_response({"auth": self.enabled, "user": None}, 200, [("set-cookie", sessions.clear_cookie())])

    async def whoami(self, request: HttpRequest) -> HttpResponse:
        if not self.enabled:
            return json_response({"auth": False, "user": None})
        try:
            principal = await self.principal(request)
        except errors.Unauthorized:
            return json_response({"auth": True, "user": None})
        return json_response({"auth": True, "user": principal.user if principal is not None else None})


class JsonApi:
    """Every path under /api/: exact paths to handlers, with auth, methods and JSON done once."""

    def __init__(self, auth: HttpAuth) -> None:
        self.auth = auth
        self._handlers: dict[str, tuple[JsonHandler, bool]] = {}
        self._raw: dict[str, Callable[[HttpRequest], Awaitable[HttpResponse]]] = {}

    def add(self, path: str, handler: JsonHandler, *, write: bool = False) -> None:
        if not path.startswith("/api/"):
            raise ValueError(f"an API path starts with /api/, got {path!r}")
        if path in self._handlers or path in self._raw or path == "/api/session":
            raise ValueError(f"the API path {path!r} is taken")
        self._handlers[path] = (handler, write)

    def add_raw(self, path: str, handler: Callable[[HttpRequest], Awaitable[HttpResponse]]) -> None:
        """A path whose handler answers whole HTTP responses itself (a stream), authenticating with
        `auth.principal` on its own."""
        if not path.startswith("/api/"):
            raise ValueError(f"an API path starts with /api/, got {path!r}")
        if path in self._handlers or path in self._raw or path == "/api/session":
            raise ValueError(f"the API path {path!r} is taken")
        self._raw[path] = handler

    @property
    def paths(self) -> list[str]:
        return sorted([*self._handlers, *self._raw, "/api/session"])

    async def handle(self, request: HttpRequest) -> HttpResponse:
        try:
            if request.path == "/api/session":
                return await self._session(request)
            raw = self._raw.get(request.path)
            if raw is not None:
                return await raw(request)
            entry = self._handlers.get(request.path)
            if entry is None:
                return error_response(_NotFound(f"no such API path: {request.path[:200]}"))
            handler, write = entry
            method = "POST" if write else "GET"
            if request.method != method:
                return error_response(_MethodNotAllowed(f"{request.path} takes {method}"), [("allow", method)])
            if write:
                _check_write(request)
            query(request)  # a malformed query string is refused before anything runs
            principal = await self.auth.principal(request)
            return json_response(await handler(request, principal))
        except errors.KittiwakeError as error:
            return error_response(error)

    async def _session(self, request: HttpRequest) -> HttpResponse:
        if request.method == "GET":
            return await self.auth.whoami(request)
        if request.method == "POST":
            _check_write(request)
            if not self.auth.enabled:
                return json_response({"auth": False, "user": None})
            return await self.auth.login(request)
        if request.method == "DELETE":
            _check_origin(request)
            return self.auth.logout(request)
        return error_response(_MethodNotAllowed("/api/session takes GET, POST or DELETE"), [("allow", "GET, POST, DELETE")])


class _NotFound(errors.KittiwakeError):
    code = "NOT_FOUND"


class _MethodNotAllowed(errors.BadRequest):
    code = "METHOD_NOT_ALLOWED"


STATUS_OF[_NotFound.code] = 404
STATUS_OF[_MethodNotAllowed.code] = 405


def _check_write(request: HttpRequest) -> None:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != JSON:
        raise errors.BadRequest(f"a write's body is JSON, sent with Content-Type: {JSON}")
    _check_origin(request)


def _check_origin(request: HttpRequest) -> None:
    origin = request.headers.get("origin")
    if origin is None:
        return
    host = request.headers.get("host", "")
    if urlsplit(origin).netloc.lower() != host.lower():
        raise errors.Forbidden(f"a write from another site ({origin[:100]}) is refused")


def _credentials(header: str) -> tuple[str, str]:
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    scheme = scheme.lower()
    if scheme == "basic":
        try:
            value = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise errors.Unauthorized("Authorization: Basic needs base64 of user:token") from None
    elif scheme != "bearer":
        raise errors.Unauthorized("Authorization takes Basic base64(user:token) or Bearer user:token")
    user, colon, token = value.partition(":")
    if not colon:
        raise errors.Unauthorized("the credentials are user:token")
    return user, token


def _source(peer: str | None) -> str:
    """The address a failure budget counts against (the peer's host, not its port)."""
    if not peer:
        return "?"
    host, _, _ = peer.rpartition(":")
    return host or peer


def _counted(request: HttpRequest, principal: Principal) -> Principal:
    """`principal`, told to the request's connection: it counts as the user's from now on."""
    if request.authenticated is not None:
        request.authenticated(principal.user)
    return principal
