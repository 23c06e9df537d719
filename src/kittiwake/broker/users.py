"""The auth file: users, their tokens hashed at rest, and their grants.

A JSON file, written by `kittiwake auth add-user` (nobody needs to hash by
hand) and read by `kittiwake broker --auth-file`:

    {
      "kittiwake_auth": 1,
      "users": {
        "alice": {
          "token_hash": "scrypt:16384:8:1:<salt, base64>:<hash, base64>",
          "rights": {"alice.*": ["produce", "consume", "admin"], "shared.inbox": ["produce"]},
          "sqs_secret": "<optional: the secret access key of the SQS API>"
        }
      }
    }

A token is hashed with scrypt (n=16384, r=8, p=1, 32 bytes) and a random
16-byte salt per user: about 50 ms and 16 MiB per check, so a stolen file
is slow to attack, and the broker runs the check in a small thread pool
(`kittiwake.broker.auth`), never on its event loop. Generated tokens are 32
random bytes (43 URL-safe characters), far beyond guessing.

An `sqs_secret` (`kittiwake auth sqs-secret USER`) lets the user sign
requests to the broker's SQS API (`--sqs-port`) with SigV4: access key id =
the user name, secret access key = that secret. SigV4 checks a signature
with the secret itself, so it is kept as it is, not hashed (AWS keeps its
secret keys the same way): the file is then as sensitive as those keys.

User names are 1..64 characters of `[A-Za-z0-9_.@-]`; a given token is 16..256
printable ASCII characters. Rights map a queue pattern (see
`kittiwake.queue_globs`) to a list of permissions (see
`kittiwake.broker.access`). Everything is validated on load, so a bad file
stops the broker at start with a message naming the user and the field.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from kittiwake.broker.access import Grant, Permission
from kittiwake.queue_globs import PatternError, QueuePattern

FORMAT_VERSION = 1
MAX_USER_CHARS = 64
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 256
SALT_BYTES = 16
HASH_BYTES = 32
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 14, 8, 1
# bounds on parameters read from a file: a typo must not ask for gigabytes
MAX_SCRYPT_N, MAX_SCRYPT_R, MAX_SCRYPT_P = 1 << 20, 32, 16
SCRYPT_MAX_MEMORY = 1 << 30
_USER_RE = re.compile(r"[A-Za-z0-9_.@\-]{1,64}")  # used with fullmatch
ALL = "all"  # shorthand for the three permissions in `--rights`


class UserFileError(ValueError):
    """The auth file, or an argument meant for it, is not valid; the message says where."""


def validate_user(name: object) -> str:
    if not isinstance(name, str) or not _USER_RE.fullmatch(name):
        raise UserFileError(f"user name {str(name)[:80]!r} must be 1..{MAX_USER_CHARS} characters of [A-Za-z0-9_.@-]")
    return name


def validate_token(token: object) -> str:
    if not isinstance(token, str) or not (MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS):
        raise UserFileError(f"a token must be {MIN_TOKEN_CHARS}..{MAX_TOKEN_CHARS} characters")
    if not all(" " < char < "\x7f" for char in token):
        raise UserFileError("a token must be printable ASCII without spaces")
    return token


def new_token() -> str:
    """A fresh random token: 32 bytes, URL-safe base64 (it goes in `kw://user:token@host`)."""
    return secrets.token_urlsafe(32)


# ------------------------------------------------------------ token hashes


@dataclass(frozen=True, slots=True)
class TokenHash:
    """An scrypt hash of a token with its parameters and salt, as stored in the file."""

    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    @classmethod
    def of(cls, token: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> TokenHash:
        salt = secrets.token_bytes(SALT_BYTES)
        return cls(n, r, p, salt, _scrypt(token, salt, n, r, p, HASH_BYTES))

    def verify(self, token: str) -> bool:
        """Whether `token` hashes to this (slow, by design: call it off the event loop)."""
        computed = _scrypt(token, self.salt, self.n, self.r, self.p, len(self.digest))
        return hmac.compare_digest(computed, self.digest)

    def encode(self) -> str:
        salt = base64.b64encode(self.salt).decode()
        digest = base64.b64encode(self.digest).decode()
        return f"scrypt:{self.n}:{self.r}:{self.p}:{salt}:{digest}"

    @classmethod
    def parse(cls, text: object) -> TokenHash:
        if not isinstance(text, str):
            raise UserFileError("token_hash must be a string")
        parts = text.split(":")
        if len(parts) != 6 or parts[0] != "scrypt":
            raise UserFileError("token_hash must look like scrypt:N:R:P:SALT:HASH")
        try:
            n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
            salt = base64.b64decode(parts[4], validate=True)
            digest = base64.b64decode(parts[5], validate=True)
        except ValueError as exc:
            raise UserFileError(f"token_hash is malformed: {exc}") from None
        if not (2 <= n <= MAX_SCRYPT_N and n & (n - 1) == 0 and 1 <= r <= MAX_SCRYPT_R and 1 <= p <= MAX_SCRYPT_P):
            raise UserFileError(f"token_hash has scrypt parameters out of range: n={n} r={r} p={p}")
        if len(salt) < 8 or not (16 <= len(digest) <= 64):
            raise UserFileError("token_hash has a salt under 8 bytes or a hash outside 16..64 bytes")
        return cls(n, r, p, salt, digest)


def _scrypt(token: str, salt: bytes, n: int, r: int, p: int, length: int) -> bytes:
    return hashlib.scrypt(token.encode(), salt=salt, n=n, r=r, p=p, maxmem=SCRYPT_MAX_MEMORY, dklen=length)


# ------------------------------------------------------------------ users


@dataclass(frozen=True, slots=True)
class UserRecord:
    """One user of the file."""

    name: str
    token_hash: TokenHash
    grants: tuple[Grant, ...]
    sqs_secret: str | None = None  # the SigV4 secret access key of the SQS API, if the user has one

    def rights_json(self) -> dict[str, list[str]]:
        return {
            grant.pattern.text: [permission.value for permission in Permission if permission in grant.permissions]
            for grant in self.grants
        }


def parse_permissions(values: Iterable[object], where: str) -> frozenset[Permission]:
    permissions: set[Permission] = set()
    for value in values:
        if value == ALL:
            permissions.update(Permission)
            continue
        try:
            permissions.add(Permission(value))
        except ValueError:
            names = ", ".join(permission.value for permission in Permission)
            raise UserFileError(f"{where}: unknown permission {str(value)[:40]!r}; expected {names} or {ALL}") from None
    if not permissions:
        raise UserFileError(f"{where}: no permissions")
    return frozenset(permissions)


def parse_grants(rights: object, where: str) -> tuple[Grant, ...]:
    """Grants from a `{"pattern": ["produce", ...]}` map."""
    if not isinstance(rights, Mapping):
        raise UserFileError(f"{where}: rights must be a map of queue pattern to a list of permissions")
    grants = []
    for pattern, permissions in rights.items():
        try:
            compiled = QueuePattern(pattern)
        except PatternError as exc:
            raise UserFileError(f"{where}: {exc}") from None
        if not isinstance(permissions, list):
            raise UserFileError(f"{where}: the permissions of {pattern!r} must be a list")
        grants.append(Grant(compiled, parse_permissions(permissions, f"{where}, pattern {pattern!r}")))
    return tuple(grants)


def parse_rights_options(specs: Iterable[str]) -> tuple[Grant, ...]:
    """Grants from command-line `PATTERN=PERMISSION[,PERMISSION...]` strings."""
    rights: dict[str, list[str]] = {}
    for spec in specs:
        pattern, sep, permissions = spec.partition("=")
        if not sep or not pattern:
            raise UserFileError(f"--rights {spec!r} must look like PATTERN=produce,consume,admin (or PATTERN=all)")
        rights.setdefault(pattern.strip(), []).extend(part.strip() for part in permissions.split(",") if part.strip())
    return parse_grants(rights, "--rights")


def parse_users(document: object) -> dict[str, UserRecord]:
    if not isinstance(document, dict) or document.get("kittiwake_auth") != FORMAT_VERSION:
        raise UserFileError(f'not a Kittiwake auth file: expected {{"kittiwake_auth": {FORMAT_VERSION}, "users": {{...}}}}')
    users = document.get("users")
    if not isinstance(users, dict):
        raise UserFileError('"users" must be a map of user name to user')
    records = {}
    for name, fields in users.items():
        validate_user(name)
        where = f"user {name!r}"
        if not isinstance(fields, dict):
            raise UserFileError(f"{where} must be a map with token_hash and rights")
        unknown = set(fields) - {"token_hash", "rights", "sqs_secret"}
        if unknown:
            raise UserFileError(f"{where} has unknown fields {sorted(unknown)}")
        try:
            token_hash = TokenHash.parse(fields.get("token_hash"))
        except UserFileError as exc:
            raise UserFileError(f"{where}: {exc}") from None
        sqs_secret = fields.get("sqs_secret")
        if sqs_secret is not None:
            try:
                validate_token(sqs_secret)
            except UserFileError as exc:
                raise UserFileError(f"{where}: sqs_secret: {exc}") from None
        records[name] = UserRecord(name, token_hash, parse_grants(fields.get("rights", {}), where), sqs_secret)
    return records


def load_users(path: str | os.PathLike[str]) -> dict[str, UserRecord]:
    """The users of an auth file; `UserFileError` (with the path) if it cannot be used."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserFileError(f"cannot read the auth file {os.fspath(path)!r}: {exc.strerror or exc}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise UserFileError(f"the auth file {os.fspath(path)!r} is not JSON: {exc}") from None
    try:
        return parse_users(document)
    except UserFileError as exc:
        raise UserFileError(f"the auth file {os.fspath(path)!r}: {exc}") from None


def dump_users(users: Mapping[str, UserRecord]) -> str:
    document: dict[str, Any] = {
        "kittiwake_auth": FORMAT_VERSION,
        "users": {
            name: {"token_hash": record.token_hash.encode(), "rights": record.rights_json(),
                   **({"sqs_secret": record.sqs_secret} if record.sqs_secret else {})}
            for name, record in sorted(users.items())
        },
    }
    return json.dumps(document, indent=2) + "\n"


def save_users(path: str | os.PathLike[str], users: Mapping[str, UserRecord]) -> None:
    """Write the file whole and atomically (a broker reading it sees the old or the new), mode 0600."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write(dump_users(users))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def load_or_empty(path: str | os.PathLike[str]) -> dict[str, UserRecord]:
    """The users of a file that may not exist yet (the first `add-user` creates it)."""
    if not Path(path).exists():
        return {}
    return load_users(path)
