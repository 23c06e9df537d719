"""The auth file: tokens hashed with scrypt and a salt per user, rights validated on load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kittiwake.broker.access import Permission
from kittiwake.broker.users import (
    TokenHash,
    UserFileError,
    UserRecord,
    load_users,
    new_token,
    parse_grants,
    parse_rights_options,
    save_users,
    validate_token,
    validate_user,
)


def test_a_token_verifies_against_its_hash_only() -> None:
    token = new_token()
    hashed = TokenHash.of(token)
    assert hashed.verify(token)
    assert not hashed.verify(token + "x") and not hashed.verify("")
    assert TokenHash.parse(hashed.encode()) == hashed
    again = TokenHash.of(token)
    assert again.salt != hashed.salt and again.digest != hashed.digest  # a salt per hash


def test_generated_tokens_are_long_url_safe_and_distinct() -> None:
    tokens = {new_token() for _ in range(100)}
    assert len(tokens) == 100
    assert all(len(token) == 43 and validate_token(token) for token in tokens)


def test_the_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    users = {
        "alice": UserRecord("alice", TokenHash.of("alice-token-0123456789"),
                            parse_rights_options(["alice.*=all", "shared.in=produce", "shared.in=consume"])),
    }
    save_users(path, users)
    loaded = load_users(path)
    assert loaded["alice"].token_hash == users["alice"].token_hash
    assert loaded["alice"].rights_json() == {"alice.*": ["produce", "consume", "admin"], "shared.in": ["produce", "consume"]}
    assert [grant.pattern.text for grant in loaded["alice"].grants] == ["alice.*", "shared.in"]
    assert Permission.ADMIN in loaded["alice"].grants[0].permissions


GOOD_HASH = TokenHash.of("some-token-0123456789").encode()


@pytest.mark.parametrize(
    "document, reason",
    [
        ("not json", "not JSON"),
        ({"users": {}}, "not a Kittiwake auth file"),
        ({"kittiwake_auth": 2, "users": {}}, "not a Kittiwake auth file"),
        ({"kittiwake_auth": 1, "users": []}, '"users" must be a map'),
        ({"kittiwake_auth": 1, "users": {"bad name": {"token_hash": GOOD_HASH}}}, "user name"),
        ({"kittiwake_auth": 1, "users": {"a": {"token_hash": "md5:x"}}}, "user 'a': token_hash must look like"),
        ({"kittiwake_auth": 1, "users": {"a": {"token_hash": "scrypt:3:8:1:AAAAAAAAAAA=:" + "A" * 44}}}, "out of range"),
        ({"kittiwake_auth": 1, "users": {"a": {"token_hash": "scrypt:1073741824:8:1:AAAAAAAAAAA=:" + "A" * 44}}},
         "out of range"),
        ({"kittiwake_auth": 1, "users": {"a": {"token_hash": "scrypt:16384:8:1:%%%:AAAA"}}}, "malformed"),
        ({"kittiwake_auth": 1, "users": {"a": {"token_hash": GOOD_HASH, "rights": {"x*": ["read"]}}}},
         "unknown permission 'read'"),
        ({"kittiwake_auth": 1, "users": {"a": {"token_hash": GOOD_HASH, "rights": {"x[y]": ["produce"]}}}},
         "wildcards"),
        ({"kittiwake_auth": 1, "users": {"a": {"token_hash": GOOD_HASH, "rights": {"x": []}}}}, "no permissions"),
        ({"kittiwake_auth": 1, "users": {"a": {"token_hash": GOOD_HASH, "token": "plain"}}}, "unknown fields"),
    ],
)
def test_a_bad_file_is_refused_with_where_and_why(tmp_path: Path, document: object, reason: str) -> None:
    path = tmp_path / "users.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(UserFileError, match=reason) as caught:
        load_users(path)
    assert str(path) in str(caught.value)


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(UserFileError, match="cannot read the auth file"):
        load_users(tmp_path / "absent.json")


@pytest.mark.parametrize("name", ["", "a" * 65, "al ice", "al\x00ice", "alïce"])
def test_bad_user_names(name: str) -> None:
    with pytest.raises(UserFileError):
        validate_user(name)


@pytest.mark.parametrize("token", ["short", "x" * 257, "has space in it 1234", "tab\tin-it-0123456789"])
def test_bad_tokens(token: str) -> None:
    with pytest.raises(UserFileError):
        validate_token(token)


def test_rights_options() -> None:
    [grant] = parse_rights_options(["q.*=produce, consume"])
    assert grant.permissions == {Permission.PRODUCE, Permission.CONSUME}
    with pytest.raises(UserFileError, match="PATTERN="):
        parse_rights_options(["=all"])
    with pytest.raises(UserFileError, match="must be a map"):
        parse_grants(["q"], "test")
