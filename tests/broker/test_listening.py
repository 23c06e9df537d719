"""The listening line (`broker.listening`): what the broker prints, parsed back to what it said.

Pure: `format_listening_line` and `parse_listening_line` round-trip for every `Listening` a broker
can describe (hypothesis), the line is byte for byte the one scripts have always read, and a line
that is not one is refused. A real broker's own line round-trips in `tests/testing`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kittiwake.broker.listening import Listening, format_listening_line, parse_listening_line

PORTS = st.integers(min_value=0, max_value=65535)
NO_SPACE = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=30)
FACE_NAMES = st.from_regex(r"[A-Za-z0-9_]{1,12}", fullmatch=True).filter(lambda name: name != "tls")
# a directory's path or a PostgreSQL URL with its schema: anything on one line, spaces included
STORES = st.builds(lambda kind, text: f"{kind}={text}", st.sampled_from(["data", "store"]),
                   st.text(st.characters(blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029",
                                         blacklist_categories=("Cs",)), max_size=60))
LISTENINGS = st.builds(
    Listening,
    host=NO_SPACE | st.sampled_from(["", "127.0.0.1", "0.0.0.0", "::", "::1", "localhost"]),
    port=PORTS,
    store=STORES,
    durability=NO_SPACE | st.sampled_from(["fsync", "os"]),
    auth=st.booleans(),
    plaintext=st.booleans(),
    tls_port=st.none() | PORTS,
    face_ports=st.dictionaries(FACE_NAMES, PORTS, max_size=4),
)


@given(LISTENINGS)
def test_every_line_parses_back_to_what_it_says(listening: Listening) -> None:
    line = format_listening_line(listening)
    assert "\n" not in line
    assert parse_listening_line(line) == listening
    assert parse_listening_line(line + "\n") == listening
    assert list(parse_listening_line(line).face_ports) == list(listening.face_ports)  # in start order


@given(LISTENINGS)
def test_every_parsed_line_formats_back_to_the_same_bytes(listening: Listening) -> None:
    line = format_listening_line(listening)
    assert format_listening_line(parse_listening_line(line)) == line


def test_the_line_is_the_one_scripts_have_always_read() -> None:
    every_port = Listening(host="0.0.0.0", port=7371, store="data=/srv/kittiwake data", durability="fsync",
                           auth=True, plaintext=False, tls_port=7371,
                           face_ports={"udp": 7372, "sqs": 9324, "http": 8080})
    assert format_listening_line(every_port) == (
        "kittiwake broker listening on 0.0.0.0:7371 tls_port=7371 udp_port=7372 sqs_port=9324 http_port=8080 "
        "plaintext=off auth=on data=/srv/kittiwake data durability=fsync"
    )
    plain = Listening(host="127.0.0.1", port=7370, store="store=postgresql://kw@db/queues schema=kittiwake brokers=many",
                      durability="os")
    assert format_listening_line(plain) == (
        "kittiwake broker listening on 127.0.0.1:7370 auth=off "
        "store=postgresql://kw@db/queues schema=kittiwake brokers=many durability=os"
    )
    assert parse_listening_line(format_listening_line(plain)).data_dir is None
    assert parse_listening_line(format_listening_line(every_port)).data_dir == "/srv/kittiwake data"


@pytest.mark.parametrize("line", [
    "",
    "kittiwake broker listening on 127.0.0.1:7370",  # cut short
    "kittiwake broker listening on 127.0.0.1:port auth=off data=/d durability=fsync",
    "kittiwake broker listening on 127.0.0.1:7370 auth=maybe data=/d durability=fsync",
    "kittiwake broker listening on 127.0.0.1:7370 auth=off elsewhere=/d durability=fsync",
    "udp relay listening on 127.0.0.1:7370 -> 127.0.0.1:7371",
    "2026-01-01 12:00:00 INFO kittiwake.broker: broker started on 127.0.0.1:7370",
])
def test_a_line_that_is_not_a_listening_line_is_refused(line: str) -> None:
    with pytest.raises(ValueError, match="not a kittiwake broker listening line"):
        parse_listening_line(line)


@pytest.mark.parametrize("name", ["tls", "with space", "dash-ed", ""])
def test_a_face_name_the_parser_could_not_read_back_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="face's name"):
        format_listening_line(Listening(host="h", port=1, store="data=/d", durability="os", face_ports={name: 2}))
