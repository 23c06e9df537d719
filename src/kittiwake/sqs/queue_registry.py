"""SQS queues and their attributes, kept durably in the broker's own queues `_sqs/<name>`.

Each SQS queue has one task in `_sqs/<name>` (pid `queue`) whose data is
JSON: the attributes a client set, the created and last-modified times, and
with an auth file the user who set its RedrivePolicy (`redrive_by`, which
`redrive` checks before every move; a policy stored without one is older).
Creating a queue enqueues that task (an existing one collapses: the queue
exists); changing attributes leases it and replaces it in one atomic update;
deleting the queue deletes that queue. Every change goes through the group
commit like any request, so a queue acked as created survives a crash.

The registry caches what it read: it is the only writer on one broker, and a
name it does not know is looked up in the store before it is called missing
(another broker on a shared store may have created it). A change made by
another broker to a queue this one has cached is not seen until restart:
run the SQS API on one broker of a shared store.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from kittiwake import errors
from kittiwake.protocol import messages as m
from kittiwake.sqs import naming, sqs_errors
from kittiwake.broker.local_calls import LocalCalls, request_id

META_PID = "queue"
MAX_ATTEMPTS = 1_000_000  # never dead-lettered by the engine: SQS counts receives itself

DEFAULTS: dict[str, str] = {
    "DelaySeconds": "0",
    "MaximumMessageSize": "1048576",
    "MessageRetentionPeriod": "345600",
    "ReceiveMessageWaitTimeSeconds": "0",
    "VisibilityTimeout": "30",
    "SqsManagedSseEnabled": "true",
}
FIFO_DEFAULTS: dict[str, str] = {
    "ContentBasedDeduplication": "false",
    "DeduplicationScope": "queue",
    "FifoQueue": "true",
    "FifoThroughputLimit": "perQueue",
}
INTEGER_BOUNDS: dict[str, tuple[int, int]] = {
    "DelaySeconds": (0, 900),
    "MaximumMessageSize": (1024, 1_048_576),
    "MessageRetentionPeriod": (60, 1_209_600),
    "ReceiveMessageWaitTimeSeconds": (0, 20),
    "VisibilityTimeout": (0, 43_200),
    "KmsDataKeyReusePeriodSeconds": (60, 86_400),
}
BOOLEANS = ("ContentBasedDeduplication", "FifoQueue", "SqsManagedSseEnabled")
FREE_TEXT = ("Policy", "RedriveAllowPolicy", "KmsMasterKeyId")
FIFO_ONLY = ("ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")
SETTABLE = (*INTEGER_BOUNDS, *BOOLEANS, *FREE_TEXT, *FIFO_ONLY[1:], "RedrivePolicy")
COMPUTED = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesDelayed",
    "ApproximateNumberOfMessagesNotVisible",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
)
READABLE = frozenset((*SETTABLE, *COMPUTED))


@dataclass(slots=True)
class SqsQueue:
    name: str
    attributes: dict[str, str]
    created: int
    modified: int
    redrive_by: str | None = None  # the user who set the RedrivePolicy; None: no auth file, or stored before
    fifo_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # FIFO receives of this queue, one at a time

    @property
    def fifo(self) -> bool:
        return self.attributes.get("FifoQueue") == "true"

    def int_attribute(self, name: str) -> int:
        return int(self.attributes.get(name, DEFAULTS.get(name, "0")))

    @property
    def redrive(self) -> tuple[str, int] | None:
        """(dead-letter queue name, maxReceiveCount) of the RedrivePolicy, if any."""
        text = self.attributes.get("RedrivePolicy")
        if not text:
            return None
        policy = json.loads(text)
        target = naming.name_of_arn(str(policy.get("deadLetterTargetArn", "")))
        return (target, int(policy["maxReceiveCount"])) if target else None

    def redrive_allowed_from(self, source: str) -> bool:
        """Whether this queue's RedriveAllowPolicy lets queue `source` use it as its dead-letter queue
        (no policy: any queue may)."""
        text = self.attributes.get("RedriveAllowPolicy")
        if not text:
            return True
        try:
            policy = json.loads(text)
        except ValueError:  # stored before it was checked: refuse rather than guess
            return False
        permission = policy.get("redrivePermission") if isinstance(policy, dict) else None
        if permission == "allowAll":
            return True
        if permission == "byQueue":
            return source in {naming.name_of_arn(str(arn)) for arn in policy.get("sourceQueueArns") or []}
        return False

    def encode(self) -> bytes:
        stored: dict[str, Any] = {"attributes": self.attributes, "created": self.created, "modified": self.modified}
        if self.redrive_by is not None:
            stored["redrive_by"] = self.redrive_by
        return json.dumps(stored).encode()


def _normalise(name: str, value: Any, fifo: bool, known: dict[str, SqsQueue], queue: str) -> str:
    """One attribute a client set on `queue`, checked and in the form GetQueueAttributes returns it."""
    if name not in SETTABLE:
        raise sqs_errors.invalid_attribute_name(name)
    if name in FIFO_ONLY and not fifo:
        raise sqs_errors.invalid_attribute_name(name)
    text = value if isinstance(value, str) else json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    if name in INTEGER_BOUNDS:
        low, high = INTEGER_BOUNDS[name]
        try:
            number = int(text)
        except ValueError:
            raise sqs_errors.invalid_attribute_value(name) from None
        if not low <= number <= high:
            raise sqs_errors.invalid_attribute_value(name, f"must be between {low} and {high}")
        return str(number)
    if name in BOOLEANS:
        if text.lower() not in ("true", "false"):
            raise sqs_errors.invalid_attribute_value(name)
        return text.lower()
    if name == "RedrivePolicy":
        return _redrive_policy(text, fifo, known, queue)
    if name == "RedriveAllowPolicy":
        return _redrive_allow_policy(text)
    return text


ALLOW_PERMISSIONS = ("allowAll", "denyAll", "byQueue")
MAX_SOURCE_QUEUES = 10


def _redrive_allow_policy(text: str) -> str:
    """A RedriveAllowPolicy as SQS checks it: redrivePermission allowAll, denyAll or byQueue, and with
    byQueue 1 to 10 sourceQueueArns (none otherwise); "" clears it."""
    if text in ("", "{}"):
        return ""
    try:
        policy = json.loads(text)
    except ValueError:
        raise sqs_errors.invalid_attribute_value("RedriveAllowPolicy", "not valid JSON") from None
    if not isinstance(policy, dict) or policy.get("redrivePermission") not in ALLOW_PERMISSIONS:
        raise sqs_errors.invalid_attribute_value(
            "RedriveAllowPolicy", f"redrivePermission must be one of {', '.join(ALLOW_PERMISSIONS)}")
    sources = policy.get("sourceQueueArns")
    if policy["redrivePermission"] == "byQueue":
        if not isinstance(sources, list) or not 1 <= len(sources) <= MAX_SOURCE_QUEUES or not all(
                isinstance(arn, str) and naming.name_of_arn(arn) for arn in sources):
            raise sqs_errors.invalid_attribute_value(
                "RedriveAllowPolicy", f"byQueue needs 1 to {MAX_SOURCE_QUEUES} sourceQueueArns (queue ARNs)")
    elif sources is not None:
        raise sqs_errors.invalid_attribute_value("RedriveAllowPolicy", "sourceQueueArns goes only with byQueue")
    return text


def _redrive_policy(text: str, fifo: bool, known: dict[str, SqsQueue], source: str) -> str:
    if text in ("", "{}"):
        return ""
    try:
        policy = json.loads(text)
    except ValueError:
        raise sqs_errors.invalid_parameter("Redrive policy is not a dict or valid json") from None
    if not isinstance(policy, dict):
        raise sqs_errors.invalid_parameter("Redrive policy is not a dict or valid json")
    if "deadLetterTargetArn" not in policy:
        raise sqs_errors.invalid_parameter("Redrive policy does not contain deadLetterTargetArn")
    if "maxReceiveCount" not in policy:
        raise sqs_errors.invalid_parameter("Redrive policy does not contain maxReceiveCount")
    try:
        count = int(policy["maxReceiveCount"])
    except (TypeError, ValueError):
        raise sqs_errors.invalid_parameter("Value for parameter maxReceiveCount is invalid") from None
    if not 1 <= count <= 1000:
        raise sqs_errors.invalid_parameter("Value for parameter maxReceiveCount is invalid. Reason: must be 1 to 1000")
    arn = str(policy["deadLetterTargetArn"])
    target = known.get(naming.name_of_arn(arn) or "")
    if target is None:
        raise sqs_errors.SqsError("QueueDoesNotExist", f"Could not find DLQ for {arn}",
                                  code="AWS.SimpleQueueService.NonExistentQueue")
    if fifo != target.fifo:
        raise sqs_errors.SqsError("InvalidParameterCombination",
                                  "Fifo queues cannot use non fifo dead letter queues" if fifo
                                  else "Standard queues cannot use fifo dead letter queues")
    if not target.redrive_allowed_from(source):
        raise sqs_errors.invalid_parameter(
            f"Value for parameter RedrivePolicy is invalid. Reason: the RedriveAllowPolicy of {target.name[:80]!r} "
            f"does not allow {source[:80]!r} to use it as a dead-letter queue")
    return json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": count})


class QueueRegistry:
    """Every SQS queue of the broker, read at start and kept in step with what it writes."""

    def __init__(self, calls: LocalCalls) -> None:
        self.calls = calls
        self.queues: dict[str, SqsQueue] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def load(self) -> None:
        infos = await self.calls.call(m.ListQueues(id=request_id(), op="list_queues",
                                                   pattern=naming.META_PREFIX + "*", limit=1_000_000))
        for info in infos:
            name = info.queue[len(naming.META_PREFIX):]
            queue = await self._read(name)
            if queue is not None:
                self.queues[name] = queue

    async def _read(self, name: str) -> SqsQueue | None:
        try:
            view = await self.calls.call(m.Get(id=request_id(), op="get", queue=naming.meta_queue(name), pid=META_PID))
        except errors.TaskNotFound:
            return None
        if view.state == "gone":
            return None
        stored = json.loads(view.data)
        setter = stored.get("redrive_by")
        return SqsQueue(name, stored["attributes"], stored["created"], stored["modified"],
                        setter if isinstance(setter, str) else None)

    async def get(self, name: str) -> SqsQueue:
        """The queue `name`, or QueueDoesNotExist."""
        queue = self.queues.get(name)
        if queue is None:
            try:
                naming.validate_queue_name(name)
            except sqs_errors.SqsError:
                raise sqs_errors.queue_does_not_exist() from None
            queue = await self._read(name)
            if queue is None:
                raise sqs_errors.queue_does_not_exist()
            self.queues[name] = queue
        return queue

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    def attributes_for_create(self, name: str, given: dict[str, Any]) -> dict[str, str]:
        fifo = str(given.get("FifoQueue", "false")).lower() == "true"
        if fifo != naming.is_fifo(name):
            raise sqs_errors.invalid_parameter(
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, "
                "must end with .fifo suffix and be 1 to 80 in length" if fifo or "FifoQueue" not in given
                else "Queue name must end in .fifo for FIFO queues")
        attributes = dict(DEFAULTS)
        if fifo:
            attributes.update(FIFO_DEFAULTS)
        for key, value in given.items():
            normal = _normalise(key, value, fifo, self.queues, name)
            if normal == "" and key in ("RedrivePolicy", "RedriveAllowPolicy"):
                attributes.pop(key, None)
            else:
                attributes[key] = normal
        return attributes

    async def create(self, name: str, given: dict[str, Any], user: str | None = None) -> SqsQueue:
        """Create the queue `name` (or find it, with the same attributes); `user` asks (auth file), and is
        recorded as its RedrivePolicy's setter if `given` has one."""
        naming.validate_queue_name(name)
        attributes = self.attributes_for_create(name, given)
        async with self._lock(name):
            existing = self.queues.get(name) or await self._read(name)
            if existing is not None:
                self.queues[name] = existing
                if any(existing.attributes.get(key) != attributes.get(key) for key in given):
                    raise sqs_errors.queue_already_exists()
                return existing
            now = int(time.time())
            queue = SqsQueue(name, attributes, now, now, user if "RedrivePolicy" in attributes else None)
            task = m.TaskIn(queue=naming.meta_queue(name), data=queue.encode(), pid=META_PID, max_attempts=MAX_ATTEMPTS)
            outcomes = await self.calls.call(m.Enqueue(id=request_id(), op="enqueue", tasks=[task]))
            if outcomes[0].collapsed:  # another broker of a shared store created it meanwhile
                stored = await self._read(name)
                if stored is not None:
                    queue = stored
            self.queues[name] = queue
            return queue

    async def set_attributes(self, name: str, given: dict[str, Any], user: str | None = None) -> None:
        """Change attributes of `name`; `user` asks (auth file), and becomes the RedrivePolicy's setter
        if `given` sets one (one removed has no setter; one left alone keeps its own)."""
        async with self._lock(name):
            queue = await self.get(name)
            if not given:
                return
            attributes = dict(queue.attributes)
            for key, value in given.items():
                if key == "FifoQueue" and str(value).lower() != attributes.get("FifoQueue", "false"):
                    raise sqs_errors.invalid_attribute_value("FifoQueue", "a queue cannot change its type")
                normal = _normalise(key, value, queue.fifo, self.queues, name)
                if normal == "" and key in ("RedrivePolicy", "RedriveAllowPolicy"):
                    attributes.pop(key, None)
                else:
                    attributes[key] = normal
            if not attributes.get("FifoQueue"):
                attributes.pop("FifoQueue", None)
            redrive_by = queue.redrive_by
            if "RedrivePolicy" in given:
                redrive_by = user if "RedrivePolicy" in attributes else None
            updated = SqsQueue(name, attributes, queue.created, int(time.time()), redrive_by, queue.fifo_lock)
            leased = await self.calls.call(m.Lease(id=request_id(), op="lease", queues=[naming.meta_queue(name)],
                                                   max_tasks=1, lease_secs=60.0))
            if not leased:
                raise sqs_errors.unavailable("the queue's attributes are being changed; try again")
            task = m.TaskIn(queue=naming.meta_queue(name), data=updated.encode(), pid=META_PID,
                            max_attempts=MAX_ATTEMPTS)
            ref = leased[0].lease_ref()
            try:
                await self.calls.call(m.Update(id=request_id(), op="update", dequeue=[ref], enqueue=[task]))
            except BaseException:
                # hand the attributes back at once, or the queue could not be changed until the lease ran out
                release = m.Release(id=request_id(), op="release", leases=[ref], reject=True)
                asyncio.get_running_loop().create_task(self._quietly(release))
                raise
            self.queues[name] = updated

    async def _quietly(self, request: m.Request) -> None:
        try:
            await self.calls.call(request)
        except errors.KittiwakeError:
            pass  # the lease runs out by itself

    async def delete(self, name: str) -> None:
        async with self._lock(name):
            await self.get(name)
            await self.calls.call(m.DeleteQueue(id=request_id(), op="delete_queue", queue=naming.meta_queue(name)))
            self.queues.pop(name, None)

    def names(self, prefix: str | None) -> list[str]:
        return sorted(name for name in self.queues if not prefix or name.startswith(prefix))


def finite_int(value: Any, name: str, low: int, high: int) -> int:
    """An integer request parameter in [low, high], else InvalidParameterValue."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise sqs_errors.invalid_parameter(f"Value {value!r} for parameter {name} is invalid.")
    try:
        number = float(value)
    except ValueError:
        raise sqs_errors.invalid_parameter(f"Value {value} for parameter {name} is invalid.") from None
    if not math.isfinite(number) or number != int(number) or not low <= number <= high:
        raise sqs_errors.invalid_parameter(
            f"Value {value} for parameter {name} is invalid. Reason: Must be between {low} and {high}, if provided."
        )
    return int(number)
