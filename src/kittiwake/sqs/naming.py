"""How SQS names map onto Kittiwake: queues, queue URLs, receipt handles, message ids, digests.

* A standard SQS queue `orders` is the Kittiwake queue `orders` (its tasks
  are the messages: data = body), so `kittiwake peek orders` shows what SQS
  clients sent; messages sent with a delay wait in `orders.delayed` at pid =
  due time (SQS names have no `.`, so no SQS queue can take these names).
* A FIFO queue `jobs.fifo` keeps each message group in a queue of its own,
  `jobs.fifo/<group key>`, in FIFO pid order: the receive side serves only
  groups with nothing in flight (`group_queue`).
* Queue attributes live in `_sqs/<name>` (one task), deduplication markers
  of FIFO queues in `_sqs_dedup/<name>/<minute>` (`queue_registry`, `message_actions`).
* A receipt handle is the lease: base64url of `[queue, pid, lease id]`
  (the lease id is the fencing token, so a stale handle cannot delete a
  message somebody else now holds).
* A message id is a UUID derived from (queue, pid), which never repeat; a
  FIFO message, and one moved to a dead-letter queue, carries its id in the
  header `sqs-id` instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import uuid
from typing import Any

from kittiwake.sqs import sqs_errors

ACCOUNT_ID = "000000000000"
DEFAULT_REGION = "us-east-1"
META_PREFIX = "_sqs/"
DEDUP_PREFIX = "_sqs_dedup/"
DELAYED_SUFFIX = ".delayed"
FIFO_SUFFIX = ".fifo"

# headers of a message's task
ATTRIBUTES_HEADER = "sqs-attrs"  # the message attributes, as the client sent them (JSON)
ID_HEADER = "sqs-id"
GROUP_HEADER = "sqs-group"
DEDUP_HEADER = "sqs-dedup"
SENT_HEADER = "sqs-sent"  # SentTimestamp of a message moved to a dead-letter queue
TRACE_HEADER = "sqs-trace"

_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,80}")
_GROUP_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
_HANDLE_PREFIX = "kw1."


def validate_queue_name(name: object) -> str:
    if not isinstance(name, str):
        raise sqs_errors.missing_parameter("QueueName")
    base = name[: -len(FIFO_SUFFIX)] if name.endswith(FIFO_SUFFIX) else name
    if not _NAME_RE.fullmatch(base) or len(name) > 80:
        raise sqs_errors.invalid_parameter(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
        )
    return name


def is_fifo(name: str) -> bool:
    return name.endswith(FIFO_SUFFIX)


def delayed_queue(name: str) -> str:
    return name + DELAYED_SUFFIX


def meta_queue(name: str) -> str:
    return META_PREFIX + name


def group_key(group_id: str) -> str:
    """The part of a group's queue name that names it: itself when it fits a queue name, else a digest."""
    if _GROUP_RE.fullmatch(group_id):
        return "g:" + group_id
    return "h:" + hashlib.sha256(group_id.encode("utf-8")).hexdigest()[:40]


def group_queue(name: str, group_id: str) -> str:
    return f"{name}/{group_key(group_id)}"


def owns(name: str, queue: str) -> bool:
    """Whether a Kittiwake queue holds messages of the SQS queue `name`: its group queues for a FIFO
    queue, else itself and its delayed queue (the queues a right on it must cover, `rights`)."""
    if is_fifo(name):
        return queue.startswith(name + "/")
    return queue == name or queue == name + DELAYED_SUFFIX


def queue_name_of_url(url: object) -> str:
    """The queue name of a QueueUrl (its last path segment); a bare name is taken as it is."""
    if not isinstance(url, str) or not url:
        raise sqs_errors.missing_parameter("QueueUrl")
    return url.rstrip("/").rsplit("/", 1)[-1]


def queue_url(host: str, name: str) -> str:
    return f"http://{host}/{ACCOUNT_ID}/{name}"


def queue_arn(region: str, name: str) -> str:
    return f"arn:aws:sqs:{region}:{ACCOUNT_ID}:{name}"


def name_of_arn(arn: str) -> str | None:
    parts = arn.split(":")
    return parts[5] if len(parts) == 6 and parts[0] == "arn" and parts[2] == "sqs" else None


# ------------------------------------------------------------ handles, ids


def receipt_handle(queue: str, pid: str, lease_id: int) -> str:
    raw = json.dumps([queue, pid, lease_id], separators=(",", ":")).encode()
    return _HANDLE_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_receipt_handle(handle: object) -> tuple[str, str, int]:
    """(queue, pid, lease id) of a receipt handle; ReceiptHandleIsInvalid for anything else."""
    if not isinstance(handle, str) or not handle.startswith(_HANDLE_PREFIX) or len(handle) > 4096:
        raise sqs_errors.receipt_handle_invalid(str(handle))
    text = handle[len(_HANDLE_PREFIX):]
    try:
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, TypeError):
        raise sqs_errors.receipt_handle_invalid(handle) from None
    if (not isinstance(value, list) or len(value) != 3 or not isinstance(value[0], str)
            or not isinstance(value[1], str) or type(value[2]) is not int or value[2] < 1):
        raise sqs_errors.receipt_handle_invalid(handle)
    return value[0], value[1], value[2]


def derived_message_id(queue: str, pid: str) -> str:
    digest = hashlib.sha1(f"{queue}\x00{pid}".encode("utf-8")).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def message_id(queue: str, pid: str, headers: dict[str, str] | None) -> str:
    if headers:
        given = headers.get(ID_HEADER)
        if given:
            return given
    return derived_message_id(queue, pid)


# ----------------------------------------------------------------- digests


def md5_of_body(body: str) -> str:
    return hashlib.md5(body.encode("utf-8")).hexdigest()


def _length_prefixed(value: bytes) -> bytes:
    return struct.pack("!I", len(value)) + value


def md5_of_attributes(attributes: dict[str, Any]) -> str:
    """MD5OfMessageAttributes as SQS computes it: each attribute in name order as
    length-prefixed name, length-prefixed type, a transport byte (1: string, 2: binary)
    and the length-prefixed value."""
    digest = hashlib.md5()
    for name in sorted(attributes):
        value = attributes[name]
        data_type = value["DataType"]
        digest.update(_length_prefixed(name.encode("utf-8")))
        digest.update(_length_prefixed(data_type.encode("utf-8")))
        if value.get("StringValue") is not None:
            digest.update(b"\x01")
            digest.update(_length_prefixed(value["StringValue"].encode("utf-8")))
        else:
            digest.update(b"\x02")
            digest.update(_length_prefixed(base64.b64decode(value.get("BinaryValue") or "")))
    return digest.hexdigest()
