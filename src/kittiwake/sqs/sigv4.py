"""AWS Signature Version 4 of an HTTP request: the access key it names, and whether it was signed with a secret.

The SQS API checks signatures only on a broker with an auth file, where a
user's SQS secret (`kittiwake auth sqs-secret USER`) is the secret access
key and the user name the access key id. `signed_access_key` reads the
`Authorization` header without checking anything (a broker without an auth
file takes the key as the sender's name); `verify` recomputes the signature
as the SDK did — canonical request, string to sign, the HMAC chain of the
secret over date, region and service — and compares in constant time.

The payload hash in the canonical request is always the SHA-256 of the body
that arrived, never a value the request declares: a signature therefore
covers the body, and a captured request replayed with another body fails.
An `X-Amz-Content-Sha256` header is only compared with that hash, and
refused when it differs (`XAmzContentSHA256Mismatch`, 400) — which includes
`UNSIGNED-PAYLOAD` and the streaming forms: every body must be signed.

The headers must be signed too, as AWS requires (`require_covered`): Host,
Content-Type when sent, and every `X-Amz-*` header sent — `X-Amz-Target`
names the action, so a signature that left it out could be replayed, within
its time window, as another action on the same body. The one exception is
`X-Amz-Security-Token`, which AWS lets some services take outside the
signature and which this API never reads. botocore signs all of these.

What is refused, as SQS words it: no or a malformed Authorization header
(`MissingAuthenticationToken`, `IncompleteSignature`), a header that must be
signed and is not (`IncompleteSignature`, 403), a request dated more than
`MAX_SKEW_SECS` away from the broker's clock (`RequestTimeTooSkewed`), a
declared payload hash that is not the body's (`XAmzContentSHA256Mismatch`),
a signature that does not match (`SignatureDoesNotMatch`). Presigned URLs
(the signature in the query string) are not accepted.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote

from kittiwake.broker.http_server import HttpRequest
from kittiwake.sqs.sqs_errors import SqsError

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW_SECS = 15 * 60
_AUTHORIZATION_RE = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([^/,\s]+)/([^/,\s]+)/aws4_request\s*,\s*"
    r"SignedHeaders=([a-z0-9;\-]+)\s*,\s*Signature=([0-9a-f]{64})\s*$"
)
_CREDENTIAL_RE = re.compile(r"Credential=([^/,\s]+)/[^/]*/([^/,\s]+)/")
# x-amz-* headers a request may carry unsigned: AWS lets some services take a session token added after
# signing, and this API reads none (every other x-amz-* header, X-Amz-Target among them, must be signed)
UNSIGNED_AMZ_HEADERS = frozenset({"x-amz-security-token"})


@dataclass(frozen=True, slots=True)
class Signature:
    access_key: str
    date: str  # yyyymmdd of the credential scope
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str


def signed_access_key(request: HttpRequest) -> tuple[str, str] | None:
    """(access key id, region) the request says it was signed with, unchecked; None if unsigned."""
    found = _CREDENTIAL_RE.search(request.headers.get("authorization", ""))
    return (found.group(1), found.group(2)) if found else None


def parse(request: HttpRequest) -> Signature:
    header = request.headers.get("authorization")
    if not header:
        raise SqsError("MissingAuthenticationToken", "Request is missing Authentication Token", status=403,
                       code="MissingAuthenticationToken")
    found = _AUTHORIZATION_RE.match(header.strip())
    if found is None:
        raise SqsError("IncompleteSignature", f"the Authorization header is not {ALGORITHM} Credential=…, "
                       "SignedHeaders=…, Signature=…", status=403)
    access_key, date, region, service, signed, signature = found.groups()
    return Signature(access_key, date, region, service, tuple(signed.split(";")), signature)


def verify(request: HttpRequest, signature: Signature, secret: str, now: float | None = None) -> None:
    """Raise SignatureDoesNotMatch (or RequestTimeTooSkewed, XAmzContentSHA256Mismatch, IncompleteSignature)
    unless `secret` signed `request`, its body included."""
    amz_date = request.headers.get("x-amz-date", "")
    try:
        stamp = calendar.timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
    except ValueError:
        raise SqsError("IncompleteSignature", "X-Amz-Date must be yyyymmddThhmmssZ", status=403) from None
    if abs((time.time() if now is None else now) - stamp) > MAX_SKEW_SECS:
        raise SqsError("RequestTimeTooSkewed", "Signature expired: the request's X-Amz-Date is more than "
                       f"{MAX_SKEW_SECS // 60} minutes away from the server's clock", status=403)
    if not amz_date.startswith(signature.date):
        raise SqsError("IncompleteSignature", "the credential's date must be X-Amz-Date's", status=403)
    require_covered(request, signature)
    payload = hashlib.sha256(request.body).hexdigest()
    declared = request.headers.get("x-amz-content-sha256")
    if declared is not None and declared.strip() != payload:
        raise SqsError("XAmzContentSHA256Mismatch", "The provided x-amz-content-sha256 header does not match the "
                       "SHA-256 of the request body; the body must be signed (UNSIGNED-PAYLOAD is not accepted).")
    scope = f"{signature.date}/{signature.region}/{signature.service}/aws4_request"
    digest = hashlib.sha256(canonical_request(request, signature.signed_headers, payload).encode("utf-8")).hexdigest()
    to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{digest}"
    key = signing_key(secret, signature.date, signature.region, signature.service)
    expected = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature.signature):
        raise SqsError("SignatureDoesNotMatch", "The request signature we calculated does not match the signature "
                       "you provided. Check your AWS Secret Access Key and signing method.", status=403)


def require_covered(request: HttpRequest, signature: Signature) -> None:
    """IncompleteSignature (403) unless SignedHeaders list Host, Content-Type when the request has one, and
    every X-Amz-* header it has (`UNSIGNED_AMZ_HEADERS` aside): what is not signed could be changed."""
    required = {"host"} | {name for name in request.headers if name == "content-type"
                           or (name.startswith("x-amz-") and name not in UNSIGNED_AMZ_HEADERS)}
    unsigned = sorted(required.difference(signature.signed_headers))
    if unsigned:
        raise SqsError("IncompleteSignature", "There were headers present in the request which were not signed: "
                       f"{', '.join(unsigned)[:300]} (SignedHeaders must list Host, Content-Type and every "
                       "X-Amz-* header sent)", status=403)


def canonical_request(request: HttpRequest, signed_headers: tuple[str, ...], payload_sha256: str) -> str:
    """The SigV4 canonical request; `payload_sha256` is the hex SHA-256 of the body received."""
    path = quote(request.path or "/", safe="/~")
    pairs = sorted((quote(name, safe="-_.~"), quote(value, safe="-_.~"))
                   for name, value in parse_qsl(request.query, keep_blank_values=True))
    query = "&".join(f"{name}={value}" for name, value in pairs)
    headers = "".join(f"{name}:{' '.join(request.headers.get(name, '').split())}\n" for name in signed_headers)
    return f"{request.method}\n{path}\n{query}\n{headers}\n{';'.join(signed_headers)}\n{payload_sha256}"


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret).encode("utf-8")
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    return key
