"""The broker's HTTP listener on its own: routes, keep-alive, bounds, timeouts, failing handlers.

Each test runs an `HttpServer` on a loopback port of a fresh event loop with
handlers written here (streams among them), and talks to it over real sockets.
"""

from __future__ import annotations

import asyncio
import socket
from typing import AsyncIterator, Awaitable, Callable

import pytest

from kittiwake.broker.http_server import HttpRequest, HttpResponse, HttpServer, Routes


async def echo(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200, f"{request.method} {request.path} {request.query} {len(request.body)}".encode())


async def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200, b"metrics")


async def broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug in a handler")


def serve(test: Callable[[int, HttpServer], Awaitable[None]], **options: float) -> None:
    async def main() -> None:
        routes = Routes()
        routes.add("/", echo)
        routes.add("/metrics", metrics)
        routes.add("/broken", broken)
        server = HttpServer(routes, max_body_bytes=1000, max_head_bytes=2000, **options)  # type: ignore[arg-type]
        port = await server.start("127.0.0.1", 0)
        try:
            await asyncio.wait_for(test(port, server), 20)
        finally:
            await server.stop()

    asyncio.run(main())


async def exchange(port: int, data: bytes) -> bytes:
    """Send `data`, read until the server closes or goes quiet."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    chunks = []
    try:
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), 1.0)
            if not chunk:
                break
            chunks.append(chunk)
    except asyncio.TimeoutError:
        pass
    writer.close()
    return b"".join(chunks)


def request(path: str = "/", body: bytes = b"", extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def test_the_longest_prefix_routes_and_requests_pipeline_in_order() -> None:
    async def test(port: int, server: HttpServer) -> None:
        answer = await exchange(port, request("/q?x=1", b"abc") + request("/metrics/cpu") + request("/other"))
        bodies = [part.split(b"\r\n\r\n", 1)[1][:40] for part in answer.split(b"HTTP/1.1 ")[1:]]
        assert bodies == [b"POST /q x=1 3", b"metrics", b"POST /other  0"]

    serve(test)


def test_unrouted_paths_get_404_and_the_connection_stays() -> None:
    routes = Routes()
    routes.add("/only", metrics)
    with pytest.raises(ValueError):
        routes.add("/only", metrics)
    assert routes.find("/elsewhere") is None

    async def test(port: int, server: HttpServer) -> None:
        server.routes = routes
        answer = await exchange(port, request("/elsewhere") + request("/only"))
        assert answer.startswith(b"HTTP/1.1 404")
        assert answer.count(b"HTTP/1.1 200") == 1

    serve(test)


def test_a_body_over_the_limit_gets_413_before_it_is_read() -> None:
    async def test(port: int, server: HttpServer) -> None:
        head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
        assert (await exchange(port, head)).startswith(b"HTTP/1.1 413")
        chunked = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + b"7d0\r\n" + b"y" * 2000 + b"\r\n"
        assert (await exchange(port, chunked)).startswith(b"HTTP/1.1 413")

    serve(test)


def test_a_head_check_that_answers_later_lets_the_body_in_or_refuses_it() -> None:
    async def check(request: HttpRequest) -> HttpResponse | None:
        verdict = request.headers.get("x-verdict")
        await asyncio.sleep(5 if verdict == "slow" else 0.05)  # as a key derivation would take
        if verdict == "bug":
            raise RuntimeError("a bug in a head check")
        return None if verdict == "ok" else HttpResponse(401, b"show valid credentials")

    def chunked(verdict: str) -> bytes:  # a chunked body is always checked first
        return (f"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nX-Verdict: {verdict}\r\n\r\n"
                "5\r\nhello\r\n0\r\n\r\n").encode()

    async def test(port: int, server: HttpServer) -> None:
        let_in = await exchange(port, chunked("ok") + request("/"))  # then the connection serves the next
        assert let_in.startswith(b"HTTP/1.1 200") and b"POST /  5" in let_in and let_in.count(b"HTTP/1.1 200") == 2
        assert (await exchange(port, chunked("no"))).startswith(b"HTTP/1.1 401")
        assert (await exchange(port, chunked("bug"))).startswith(b"HTTP/1.1 500")
        assert (await exchange(port, chunked("slow"))).startswith(b"HTTP/1.1 408")  # within the request's time
        assert server.handler_errors == 1

    serve(test, check_head=check, request_timeout_secs=0.5)  # type: ignore[arg-type]


def test_a_head_over_the_limit_gets_431_and_garbage_gets_400() -> None:
    async def test(port: int, server: HttpServer) -> None:
        big = request(extra="X-Big: " + "a" * 5000 + "\r\n")
        assert (await exchange(port, big)).startswith(b"HTTP/1.1 431")
        assert (await exchange(port, b"NOT HTTP AT ALL\r\n\r\n")).startswith(b"HTTP/1.1 400")

    serve(test)


def test_a_failing_handler_gets_500_and_the_server_goes_on() -> None:
    async def test(port: int, server: HttpServer) -> None:
        answer = await exchange(port, request("/broken") + request("/"))
        assert answer.startswith(b"HTTP/1.1 500")
        assert b"HTTP/1.1 200" in answer
        assert server.handler_errors == 1

    serve(test)


def test_a_request_that_does_not_arrive_whole_gets_408() -> None:
    async def test(port: int, server: HttpServer) -> None:
        answer = await exchange(port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        assert answer.startswith(b"HTTP/1.1 408")

    serve(test, request_timeout_secs=0.2)


def test_an_idle_connection_is_closed() -> None:
    async def test(port: int, server: HttpServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server, nothing said
        writer.close()

    serve(test, idle_timeout_secs=0.2)


def test_a_client_that_goes_away_cancels_its_handler() -> None:
    started = asyncio.Event
    cancelled: list[bool] = []

    async def test(port: int, server: HttpServer) -> None:
        began = started()

        async def slow(request: HttpRequest) -> HttpResponse:
            began.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
            return HttpResponse(200)

        server.routes.add("/slow", slow)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request("/slow"))
        await began.wait()
        writer.close()
        for _ in range(100):
            if cancelled:
                break
            await asyncio.sleep(0.01)
        assert cancelled == [True]

    serve(test)


def test_a_stream_is_sent_as_it_comes_then_the_connection_serves_the_next_request() -> None:
    async def test(port: int, server: HttpServer) -> None:
        async def chunks() -> AsyncIterator[bytes]:
            for index in range(3):
                await asyncio.sleep(0.01)
                yield f"event {index}\n".encode()

        async def stream(request: HttpRequest) -> HttpResponse:
            return HttpResponse(200, content_type="text/event-stream", stream=chunks())

        server.routes.add("/stream", stream)
        answer = await exchange(port, request("/stream") + request("/after"))
        head, _, rest = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
        assert b"event 0\n" in rest and b"event 2\n" in rest and rest.index(b"event 0") < rest.index(b"event 2")
        assert b"0\r\n\r\nHTTP/1.1 200" in rest  # the last chunk, then the pipelined request's answer
        assert b"POST /after" in rest

    serve(test)


def test_a_stream_ends_when_its_client_goes_and_a_failing_one_closes_its_connection() -> None:
    async def test(port: int, server: HttpServer) -> None:
        ended: list[str] = []

        async def endless() -> AsyncIterator[bytes]:
            try:
                while True:
                    yield b"tick\n"
                    await asyncio.sleep(0.01)
            finally:
                ended.append("endless")

        async def failing() -> AsyncIterator[bytes]:
            yield b"first\n"
            raise RuntimeError("a bug in a stream")

        async def stream(request: HttpRequest) -> HttpResponse:
            return HttpResponse(200, stream=endless() if request.path == "/endless" else failing())

        server.routes.add("/endless", stream)
        server.routes.add("/failing", stream)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request("/endless"))
        assert b"tick" in await reader.readuntil(b"tick\n")
        writer.close()
        for _ in range(200):
            if ended:
                break
            await asyncio.sleep(0.01)
        assert ended == ["endless"]
        answer = await exchange(port, request("/failing") + request("/"))
        assert b"first\n" in answer and b"POST /" not in answer  # closed after the failure
        assert server.handler_errors == 1
        assert (await exchange(port, request("/"))).startswith(b"HTTP/1.1 200")

    serve(test)


def test_a_client_that_stops_reading_a_stream_is_cut_off() -> None:
    async def test(port: int, server: HttpServer) -> None:
        ended: list[bool] = []

        async def flood() -> AsyncIterator[bytes]:
            try:
                while True:
                    yield b"x" * 65536
                    await asyncio.sleep(0)
            finally:
                ended.append(True)

        async def stream(request: HttpRequest) -> HttpResponse:
            return HttpResponse(200, stream=flood())

        server.routes.add("/flood", stream)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        await asyncio.get_running_loop().sock_sendall(sock, request("/flood"))  # and never read
        for _ in range(1000):
            if server.streams_cut:
                break
            await asyncio.sleep(0.01)
        assert server.streams_cut == 1 and ended == [True]
        assert (await exchange(port, request("/"))).startswith(b"HTTP/1.1 200")  # the server goes on
        sock.close()

    serve(test, max_stream_buffer_bytes=256 * 1024)


def test_a_client_that_pipelines_and_never_reads_holds_a_bounded_buffer() -> None:
    """Each pipelined request was answered into the transport's buffer whatever it held: a client
    sending 51-byte requests for an 18 KB page and reading nothing grew the broker by 182 MB."""
    async def test(port: int, server: HttpServer) -> None:
        answered: list[int] = []

        async def page(request: HttpRequest) -> HttpResponse:
            answered.append(1)
            return HttpResponse(200, b"p" * 18_000)

        server.routes.add("/page", page)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, ("127.0.0.1", port))
        pipelined = b"GET /page HTTP/1.1\r\nHost: x\r\n\r\n" * 2000
        try:
            await asyncio.wait_for(loop.sock_sendall(sock, pipelined), 2.0)  # and never read
        except asyncio.TimeoutError:
            pass  # the server stopped reading: what we send waits in the kernel
        await asyncio.sleep(0.5)
        (connection,) = server.connections
        buffered = connection.transport.get_write_buffer_size() if connection.transport is not None else 0
        assert len(answered) < 200 and buffered < 4 * 1024 * 1024, (len(answered), buffered)
        assert (await exchange(port, request("/"))).startswith(b"HTTP/1.1 200")  # others are served
        sock.close()

    serve(test)
