"""Auth files for tests, written through `kittiwake.broker.users` as `kittiwake auth add-user` writes them.

`write_auth_file(path, {"alice": ("alice-token-…", {"alice.*": ["all"]})})`
hashes each token (scrypt, as in production) and writes the file.
`ROOT` and `ALICE`/`BOB` are the users most tests need: root may do anything,
alice and bob everything on their own prefix only. `PRODUCER` is for a user who
may only enqueue into some task queues (its rights are the test's to give, e.g.
``{"tests": ["produce"]}``): the attacker of the tests that try every indirection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from kittiwake.broker.users import TokenHash, UserRecord, parse_grants, save_users

ROOT = ("root", "root-token-0123456789abcdef")
ALICE = ("alice", "alice-token-0123456789abcdef")
BOB = ("bob", "bob-token-0123456789abcdef")
PRODUCER = ("producer", "producer-token-0123456789abcdef")
STANDARD_RIGHTS: dict[str, dict[str, list[str]]] = {
    "root": {"*": ["all"]},
    "alice": {"alice.*": ["all"]},
    "bob": {"bob.*": ["all"]},
}


def write_auth_file(path: Path, users: Mapping[str, tuple[str, Mapping[str, Sequence[str]]]]) -> Path:
    records = {
        name: UserRecord(name, TokenHash.of(token), parse_grants({k: list(v) for k, v in rights.items()}, name))
        for name, (token, rights) in users.items()
    }
    save_users(path, records)
    return path


def standard_auth_file(path: Path) -> Path:
    """root, alice and bob with `STANDARD_RIGHTS`."""
    return write_auth_file(path, {name: (token, STANDARD_RIGHTS[name]) for name, token in (ROOT, ALICE, BOB)})
