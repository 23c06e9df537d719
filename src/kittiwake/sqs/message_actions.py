"""The SQS actions on messages: SendMessage(Batch), ReceiveMessage, DeleteMessage(Batch),
ChangeMessageVisibility(Batch); each turned into protocol requests run through the group commit.

One method per action of the JSON protocol (`X-Amz-Target: AmazonSQS.<Action>`),
taking the request's JSON object and returning the response's. What each does
in Kittiwake terms (names: `naming`):

* SendMessage(Batch) — enqueue: an immediate message gets a FIFO pid in the
  queue itself, a delayed one pid = due time in `<queue>.delayed`; every
  message has `max_attempts` out of reach, since SQS, not the engine, decides
  when a message has been received too often. FIFO: the message goes to its
  group's queue with `unless` naming the deduplication marker of the last
  five minutes, and the marker in the same request, so a duplicate collapses
  atomically;
* ReceiveMessage — lease (visibility timeout = lease length; the lease's
  delivery count is ApproximateReceiveCount). Standard queues lease from the
  queue and its due delayed messages, then long-poll the queue itself (a
  parked lease, woken by the next send) no longer than until the next delayed
  message is due (or, while delayed messages are in flight, a second).
  FIFO queues lease, one receive at a time per queue, only from groups with
  nothing in flight, and long-poll by looking again every `FIFO_POLL_SECS`. A leased message received more than the RedrivePolicy's
  maxReceiveCount moves to the dead-letter queue in one atomic update
  (dequeue + enqueue) and is not returned — if the policy's setter may
  still produce into it (`redrive`), else it is returned as if there were
  no policy;
* DeleteMessage(Batch) — dequeue of the handle's lease. A handle whose lease
  is over succeeds as SQS does (the message was deleted, or is someone
  else's now and stays);
* ChangeMessageVisibility(Batch) — renew to the new timeout; 0 hands the
  message back at once (a reject, which counts no receive);

Deduplication markers expire by the minute: `expire_dedup` drops the
marker queues older than the window (the service calls it every minute).
Rights: `context.require`, as for every action.

ApproximateFirstReceiveTimestamp is the first lease's time for a message
received once, and otherwise what this broker remembers (at most
`FIRST_RECEIVES` messages), else the current lease's time: approximate.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import re
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from kittiwake import errors
from kittiwake.model import LeaseRef, pid_at
from kittiwake.protocol import messages as m
from kittiwake.protocol.replies import LeasedTask
from kittiwake.sqs import naming, sqs_errors
from kittiwake.broker.local_calls import LocalCalls, request_id
from kittiwake.sqs.context import CONSUME_ONLY, PRODUCE_ONLY, ActionBase, Context, attribute_names
from kittiwake.sqs.queue_registry import MAX_ATTEMPTS, QueueRegistry, SqsQueue, finite_int
from kittiwake.sqs.redrive import RedriveRights, dead_letter_update

FIFO_POLL_SECS = 0.1
MAX_REDRIVEN_ROUNDS = 10  # leases in one receive that found only messages to move to the dead-letter queue
DEDUP_WINDOW_MINUTES = 5
FIRST_RECEIVES = 100_000
MAX_BATCH = 10
MAX_BATCH_BODY_BYTES = 1_048_576
MIN_LEASE_SECS = 0.001  # VisibilityTimeout 0: visible again at once
# FIFO pids of a burst of sends may run a few microseconds ahead of the clock; a lease of what is due
# looks this far ahead so it does not miss them (a delayed message is due at most this much early)
DUE_SLACK_SECS = 0.01
# A long poll parks on the queue itself, which a send wakes; what a send does not announce (a delayed
# message falling due, one in flight in `<queue>.delayed` becoming visible again) ends the park instead
DELAYED_PEEK = 10
IN_FLIGHT_RECHECK_SECS = 1.0
MIN_PARK_SECS = 0.05
MAX_MESSAGE_ATTRIBUTES = 10
_ENTRY_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,80}")
_ATTRIBUTE_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,256}")
_DEDUP_RE = re.compile(r"[!-~]{1,128}")
SYSTEM_ATTRIBUTES = (
    "AWSTraceHeader",
    "ApproximateFirstReceiveTimestamp",
    "ApproximateReceiveCount",
    "MessageDeduplicationId",
    "MessageGroupId",
    "SenderId",
    "SentTimestamp",
    "SequenceNumber",
)



@dataclass(slots=True)
class Outgoing:
    """A message about to be enqueued, and what its send reply says of it."""

    entry_id: str | None
    task: m.TaskIn
    md5_body: str
    md5_attributes: str | None
    message_id: str | None  # known before the enqueue (FIFO), else derived from the pid it gets
    dedup_marker: m.TaskIn | None = None



class MessageActions(ActionBase):
    """The SQS actions on messages of one broker."""

    def __init__(self, calls: LocalCalls, registry: QueueRegistry, limits_header_bytes: int,
                 redrive_rights: RedriveRights) -> None:
        super().__init__(calls, registry, redrive_rights)
        self.header_bytes = limits_header_bytes
        self.first_receives: OrderedDict[tuple[str, str], int] = OrderedDict()

    # --------------------------------------------------------------- send

    async def SendMessage(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        queue = await self.queue_of(params, ctx, PRODUCE_ONLY)
        outgoing = self._outgoing(queue, params, None, ctx, time.time())
        sent = await self._send(queue, [outgoing], ctx)
        return sent[0]

    async def SendMessageBatch(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        queue = await self.queue_of(params, ctx, PRODUCE_ONLY)
        entries = _entries(params, "Send")
        total = sum(len(str(entry.get("MessageBody", "")).encode("utf-8")) for entry in entries)
        if total > MAX_BATCH_BODY_BYTES:
            raise sqs_errors.batch_too_long(total)
        now = time.time()
        outgoing: list[Outgoing] = []
        failed: list[dict[str, Any]] = []
        for entry in entries:
            try:
                outgoing.append(self._outgoing(queue, entry, entry["Id"], ctx, now))
            except sqs_errors.SqsError as exc:
                failed.append({"Id": entry["Id"], "SenderFault": exc.sender, "Code": exc.shape, "Message": exc.message})
        successful = await self._send(queue, outgoing, ctx) if outgoing else []
        return {"Successful": successful, "Failed": failed}

    def _outgoing(self, queue: SqsQueue, params: dict[str, Any], entry_id: str | None, ctx: Context, now: float) -> Outgoing:
        body = params.get("MessageBody")
        if not isinstance(body, str) or body == "":
            raise sqs_errors.missing_parameter("MessageBody")
        data = body.encode("utf-8")
        most = queue.int_attribute("MaximumMessageSize")
        if len(data) > most:
            raise sqs_errors.invalid_parameter(
                f"One or more parameters are invalid. Reason: Message must be shorter than {most} bytes."
            )
        attributes = _message_attributes(params.get("MessageAttributes"))
        headers: dict[str, str] = {}
        md5_attributes = None
        if attributes:
            md5_attributes = naming.md5_of_attributes(attributes)
            headers[naming.ATTRIBUTES_HEADER] = json.dumps(attributes, separators=(",", ":"))
        trace = _trace_header(params.get("MessageSystemAttributes"))
        if trace is not None:
            headers[naming.TRACE_HEADER] = trace
        delay_param = params.get("DelaySeconds")
        delay = queue.int_attribute("DelaySeconds") if delay_param is None else finite_int(delay_param, "DelaySeconds", 0, 900)
        if queue.fifo:
            return self._fifo_outgoing(queue, params, entry_id, data, headers, md5_attributes, delay, now)
        # a standard queue keeps a group id (SQS fair queues) and a deduplication id and hands them back;
        # it neither orders by group nor deduplicates
        for name, header in (("MessageGroupId", naming.GROUP_HEADER), ("MessageDeduplicationId", naming.DEDUP_HEADER)):
            value = params.get(name)
            if value is None:
                continue
            if not isinstance(value, str) or not _DEDUP_RE.fullmatch(value):
                raise sqs_errors.invalid_parameter(f"Value for parameter {name} is invalid.")
            headers[header] = value
        for value in headers.values():
            if len(value.encode("utf-8")) > self.header_bytes:
                raise sqs_errors.invalid_parameter(f"Message attributes over {self.header_bytes} bytes are not supported")
        if delay > 0:
            pid = f"{pid_at(now + delay)}.{uuid.uuid4().hex}"
            task = m.TaskIn(queue=naming.delayed_queue(queue.name), data=data, pid=pid, sender=ctx.sender,
                            headers=headers or None, max_attempts=MAX_ATTEMPTS)
        else:
            task = m.TaskIn(queue=queue.name, data=data, sender=ctx.sender, headers=headers or None,
                            max_attempts=MAX_ATTEMPTS)
        return Outgoing(entry_id, task, naming.md5_of_body(body), md5_attributes, None)

    def _fifo_outgoing(self, queue: SqsQueue, params: dict[str, Any], entry_id: str | None, data: bytes,
                       headers: dict[str, str], md5_attributes: str | None, delay: int, now: float) -> Outgoing:
        group = params.get("MessageGroupId")
        if not isinstance(group, str) or not group:
            raise sqs_errors.missing_parameter("MessageGroupId")
        if not _DEDUP_RE.fullmatch(group):
            raise sqs_errors.invalid_parameter("Value for parameter MessageGroupId is invalid.")
        if params.get("DelaySeconds") not in (None, 0, "0"):
            raise sqs_errors.invalid_parameter(
                f"Value {params.get('DelaySeconds')} for parameter DelaySeconds is invalid. Reason: The request "
                "include parameter that is not valid for this queue type."
            )
        dedup = params.get("MessageDeduplicationId")
        if dedup is None:
            if queue.attributes.get("ContentBasedDeduplication") != "true":
                raise sqs_errors.invalid_parameter(
                    "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId "
                    "provided explicitly"
                )
            dedup = hashlib.sha256(data).hexdigest()
        elif not isinstance(dedup, str) or not _DEDUP_RE.fullmatch(dedup):
            raise sqs_errors.invalid_parameter("Value for parameter MessageDeduplicationId is invalid.")
        message_id = str(uuid.uuid4())
        headers[naming.ID_HEADER] = message_id
        headers[naming.GROUP_HEADER] = group
        headers[naming.DEDUP_HEADER] = dedup
        for value in headers.values():
            if len(value.encode("utf-8")) > self.header_bytes:
                raise sqs_errors.invalid_parameter(f"Message attributes over {self.header_bytes} bytes are not supported")
        minute = int(now // 60)
        markers = [(_dedup_queue(queue.name, minute - back), dedup) for back in range(DEDUP_WINDOW_MINUTES + 1)]
        pid = f"{pid_at(now + delay)}.{uuid.uuid4().hex[:8]}" if delay > 0 else None
        task = m.TaskIn(queue=naming.group_queue(queue.name, group), data=data, pid=pid, headers=headers,
                        max_attempts=MAX_ATTEMPTS, unless=markers)
        marker = m.TaskIn(queue=_dedup_queue(queue.name, minute), data=message_id.encode(), pid=dedup,
                          max_attempts=MAX_ATTEMPTS)
        return Outgoing(entry_id, task, naming.md5_of_body(data.decode("utf-8")), md5_attributes, message_id, marker)

    async def _send(self, queue: SqsQueue, outgoing: list[Outgoing], ctx: Context) -> list[dict[str, Any]]:
        tasks: list[m.TaskIn] = []
        for item in outgoing:
            tasks.append(item.task)
            if item.dedup_marker is not None:
                tasks.append(item.dedup_marker)
        outcomes = await self.call(m.Enqueue(id=request_id(), op="enqueue", tasks=tasks), ctx)
        results: list[dict[str, Any]] = []
        index = 0
        for item in outgoing:
            outcome = outcomes[index]
            index += 2 if item.dedup_marker is not None else 1
            message_id = item.message_id
            if outcome.collapsed and item.dedup_marker is not None:
                message_id = await self._deduplicated_id(queue, item.dedup_marker.pid or "", ctx) or message_id
            elif message_id is None:
                message_id = naming.derived_message_id(outcome.queue, outcome.pid)
            result: dict[str, Any] = {"MessageId": message_id, "MD5OfMessageBody": item.md5_body}
            if item.md5_attributes is not None:
                result["MD5OfMessageAttributes"] = item.md5_attributes
            if queue.fifo:
                result["SequenceNumber"] = _sequence_number(outcome.pid)
            if item.entry_id is not None:
                result = {"Id": item.entry_id, **result}
            results.append(result)
        return results

    async def _deduplicated_id(self, queue: SqsQueue, dedup: str, ctx: Context) -> str | None:
        """The message id of the message a duplicate collapsed into, from its marker."""
        minute = int(time.time() // 60)
        for back in range(DEDUP_WINDOW_MINUTES + 2):
            try:
                view = await self.calls.call(m.Get(id=request_id(), op="get", queue=_dedup_queue(queue.name, minute - back),
                                                   pid=dedup), ctx.peer)
            except errors.KittiwakeError:
                continue
            return bytes(view.data).decode("utf-8", "replace")
        return None

    async def expire_dedup(self) -> int:
        """Drop deduplication markers older than the window; returns the marker queues dropped."""
        infos = await self.calls.call(m.ListQueues(id=request_id(), op="list_queues",
                                                   pattern=naming.DEDUP_PREFIX + "*", limit=1_000_000))
        oldest = int(time.time() // 60) - DEDUP_WINDOW_MINUTES
        dropped = 0
        for info in infos:
            minute = info.queue.rsplit("/", 1)[-1]
            if minute.isdigit() and int(minute) < oldest:
                await self.calls.call(m.DeleteQueue(id=request_id(), op="delete_queue", queue=info.queue))
                dropped += 1
        return dropped

    # ------------------------------------------------------------ receive

    async def ReceiveMessage(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        queue = await self.queue_of(params, ctx, CONSUME_ONLY)
        count = finite_int(params.get("MaxNumberOfMessages", 1), "MaxNumberOfMessages", 1, 10)
        wait_param = params.get("WaitTimeSeconds")
        wait = queue.int_attribute("ReceiveMessageWaitTimeSeconds") if wait_param is None else finite_int(
            wait_param, "WaitTimeSeconds", 0, 20)
        visibility_param = params.get("VisibilityTimeout")
        visibility = queue.int_attribute("VisibilityTimeout") if visibility_param is None else finite_int(
            visibility_param, "VisibilityTimeout", 0, 43_200)
        system = set(attribute_names(params.get("AttributeNames"))) | set(attribute_names(params.get("MessageSystemAttributeNames")))
        wanted_attributes = attribute_names(params.get("MessageAttributeNames"))
        lease_secs = max(float(visibility), MIN_LEASE_SECS)
        deadline = time.monotonic() + wait
        redriven = 0
        while True:
            if queue.fifo:
                tasks = await self._lease_fifo(queue, count, lease_secs, ctx)
            else:
                tasks = await self._lease(queue, count, lease_secs, deadline, ctx)
            leased = len(tasks)
            tasks = await self._redrive(queue, tasks, ctx)
            if not tasks and leased and redriven < MAX_REDRIVEN_ROUNDS:
                redriven += 1
                continue  # all it leased went to the dead-letter queue: what came after them may be there
            remaining = deadline - time.monotonic()
            if tasks or remaining <= 0:
                break
            if queue.fifo:
                await asyncio.sleep(min(FIFO_POLL_SECS, remaining))
        messages = [self._message(task, system, wanted_attributes) for task in tasks]
        return {"Messages": messages} if messages else {}

    def _lease_request(self, queues: list[str], count: int, lease_secs: float, ctx: Context, *,
                       max_pid: str | None = None, wait_secs: float = 0.0) -> m.Lease:
        return m.Lease(id=request_id(), op="lease", queues=queues, max_tasks=count, lease_secs=lease_secs,
                       max_pid=max_pid, wait_secs=wait_secs, worker=ctx.sender)

    async def _lease(self, queue: SqsQueue, count: int, lease_secs: float, deadline: float,
                     ctx: Context) -> list[LeasedTask]:
        """Due messages now; else a long-poll on the queue, until a delayed message is due at the latest."""
        delayed = naming.delayed_queue(queue.name)
        due = pid_at(time.time() + DUE_SLACK_SECS) + "~"  # after every pid of that microsecond, FIFO or delayed
        tasks = await self.call(self._lease_request([queue.name, delayed], count, lease_secs, ctx, max_pid=due), ctx)
        remaining = deadline - time.monotonic()
        if tasks or remaining <= 0:
            return tasks
        heads = await self.call(m.Peek(id=request_id(), op="peek", queue=delayed, n=DELAYED_PEEK), ctx)
        if heads:
            now = time.time()
            # a pid that is no due time (a task put there over the binary port) is not waited for
            waiting = [at for head in heads if head.state == "available" and (at := _due_at(head.pid)) is not None]
            wake_at = min(waiting) if waiting else now + IN_FLIGHT_RECHECK_SECS
            if len(waiting) < len(heads):  # one in flight comes back when its visibility ends: look again soon
                wake_at = min(wake_at, now + IN_FLIGHT_RECHECK_SECS)
            remaining = min(remaining, max(wake_at - now, MIN_PARK_SECS))
        return await self.call(self._lease_request([queue.name], count, lease_secs, ctx, wait_secs=remaining), ctx)

    async def _lease_fifo(self, queue: SqsQueue, count: int, lease_secs: float, ctx: Context) -> list[LeasedTask]:
        """Lease from the groups with nothing in flight, one receive of the queue at a time."""
        async with queue.fifo_lock:
            infos = await self._group_infos(queue, ctx)
            free = [info.queue for info in infos if info.leased == 0 and info.size > 0]
            if not free:
                return []
            due = pid_at(time.time() + DUE_SLACK_SECS) + "~"
            return await self.call(self._lease_request(free[:1000], count, lease_secs, ctx, max_pid=due), ctx)

    async def _redrive(self, queue: SqsQueue, tasks: list[LeasedTask], ctx: Context) -> list[LeasedTask]:
        """Move messages received more than maxReceiveCount times to the dead-letter queue, if the
        policy's setter may write there now and the target's RedriveAllowPolicy lets this queue
        (`redrive`); the rest."""
        redrive = queue.redrive
        if redrive is None or not tasks:
            return tasks
        target_name, most = redrive
        moving = [task for task in tasks if task.deliveries > most]
        target = self.registry.queues.get(target_name)
        if not moving or not self.redrive_rights.allows(queue, target_name, target):
            return tasks
        await self.call(dead_letter_update(moving, target_name, target), ctx)
        moved = {id(task) for task in moving}
        return [task for task in tasks if id(task) not in moved]

    def _message(self, task: LeasedTask, system: set[str], wanted_attributes: list[str]) -> dict[str, Any]:
        headers = task.headers or {}
        body = bytes(task.data).decode("utf-8", "replace")
        message: dict[str, Any] = {
            "MessageId": naming.message_id(task.queue, task.pid, task.headers),
            "ReceiptHandle": naming.receipt_handle(task.queue, task.pid, task.lease_id),
            "MD5OfBody": naming.md5_of_body(body),
            "Body": body,
        }
        stored = headers.get(naming.ATTRIBUTES_HEADER)
        if stored and wanted_attributes:
            attributes = _filter_attributes(_stored_attributes(stored), wanted_attributes)
            if attributes:
                message["MessageAttributes"] = attributes
                message["MD5OfMessageAttributes"] = naming.md5_of_attributes(attributes)
        include = set(SYSTEM_ATTRIBUTES) if "All" in system else system & set(SYSTEM_ATTRIBUTES)
        if include:
            message["Attributes"] = self._system_attributes(task, headers, include)
        return message

    def _system_attributes(self, task: LeasedTask, headers: dict[str, str], include: set[str]) -> dict[str, str]:
        leased_ms = int((task.leased_at or time.time()) * 1000)
        key = (task.queue, task.pid)
        first = self.first_receives.get(key)
        if first is None or task.deliveries <= 1:
            first = leased_ms
            self.first_receives[key] = first
            if len(self.first_receives) > FIRST_RECEIVES:
                self.first_receives.popitem(last=False)
        values: dict[str, str | None] = {
            "AWSTraceHeader": headers.get(naming.TRACE_HEADER),
            "ApproximateFirstReceiveTimestamp": str(first),
            "ApproximateReceiveCount": str(task.deliveries),
            "MessageDeduplicationId": headers.get(naming.DEDUP_HEADER),
            "MessageGroupId": headers.get(naming.GROUP_HEADER),
            "SenderId": task.sender or "anonymous",
            "SentTimestamp": headers.get(naming.SENT_HEADER) or str(int(task.enqueued_at * 1000)),
            "SequenceNumber": _sequence_number(task.pid) if "/" in task.queue else None,  # FIFO: a group's queue
        }
        return {name: value for name, value in values.items() if name in include and value is not None}

    # ------------------------------------------------- delete, visibility

    def _lease_ref(self, queue: SqsQueue, handle: object) -> LeaseRef:
        name, pid, lease_id = naming.parse_receipt_handle(handle)
        if not naming.owns(queue.name, name):
            raise sqs_errors.receipt_handle_invalid(str(handle))
        return LeaseRef(name, pid, lease_id)

    async def DeleteMessage(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        queue = await self.queue_of(params, ctx, CONSUME_ONLY)
        handle = params.get("ReceiptHandle")
        if handle is None:
            raise sqs_errors.missing_parameter("ReceiptHandle")
        ref = self._lease_ref(queue, handle)
        await self.call(m.Dequeue(id=request_id(), op="dequeue", leases=[ref]), ctx)
        return {}  # an outcome that is not ok: deleted already, or someone else's now; SQS says ok

    async def DeleteMessageBatch(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        queue = await self.queue_of(params, ctx, CONSUME_ONLY)
        entries = _entries(params, "Delete")
        refs: list[tuple[str, LeaseRef]] = []
        failed: list[dict[str, Any]] = []
        for entry in entries:
            try:
                refs.append((entry["Id"], self._lease_ref(queue, entry.get("ReceiptHandle"))))
            except sqs_errors.SqsError as exc:
                failed.append({"Id": entry["Id"], "SenderFault": True, "Code": exc.shape, "Message": exc.message})
        if refs:
            await self.call(m.Dequeue(id=request_id(), op="dequeue", leases=[ref for _, ref in refs]), ctx)
        return {"Successful": [{"Id": entry_id} for entry_id, _ in refs], "Failed": failed}

    async def ChangeMessageVisibility(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        queue = await self.queue_of(params, ctx, CONSUME_ONLY)
        if params.get("ReceiptHandle") is None:
            raise sqs_errors.missing_parameter("ReceiptHandle")
        if params.get("VisibilityTimeout") is None:
            raise sqs_errors.missing_parameter("VisibilityTimeout")
        ref = self._lease_ref(queue, params.get("ReceiptHandle"))
        visibility = finite_int(params.get("VisibilityTimeout"), "VisibilityTimeout", 0, 43_200)
        error = (await self._change_visibility([ref], visibility, ctx))[0]
        if error is not None:
            raise error
        return {}

    async def ChangeMessageVisibilityBatch(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        queue = await self.queue_of(params, ctx, CONSUME_ONLY)
        entries = _entries(params, "ChangeMessageVisibility")
        successful: list[dict[str, str]] = []
        failed: list[dict[str, Any]] = []
        for entry in entries:  # each its own timeout: one call per entry (at most ten)
            try:
                ref = self._lease_ref(queue, entry.get("ReceiptHandle"))
                visibility = finite_int(entry.get("VisibilityTimeout"), "VisibilityTimeout", 0, 43_200)
                error = (await self._change_visibility([ref], visibility, ctx))[0]
                if error is not None:
                    raise error
            except sqs_errors.SqsError as exc:
                failed.append({"Id": entry["Id"], "SenderFault": exc.sender, "Code": exc.shape, "Message": exc.message})
            else:
                successful.append({"Id": entry["Id"]})
        return {"Successful": successful, "Failed": failed}

    async def _change_visibility(self, refs: list[LeaseRef], visibility: int, ctx: Context) -> list[sqs_errors.SqsError | None]:
        if visibility == 0:
            request: m.Request = m.Release(id=request_id(), op="release", leases=refs, reject=True)
        else:
            request = m.Renew(id=request_id(), op="renew", leases=refs, lease_secs=float(visibility))
        outcomes = await self.call(request, ctx)
        return [None if outcome.ok else sqs_errors.message_not_inflight() for outcome in outcomes]


# ------------------------------------------------------------- parameters


def _dedup_queue(name: str, minute: int) -> str:
    return f"{naming.DEDUP_PREFIX}{name}/{minute}"


def _due_at(pid: str) -> float | None:
    """When a delayed message of pid `pid` (`pid_at(due)` then a suffix) is due; None for another pid."""
    head = pid.split(".", 1)[0]
    return int(head) / 1e6 if head.isascii() and head.isdigit() else None


def _stored_attributes(stored: str) -> dict[str, Any]:
    """The message attributes a task's header holds, checked as SendMessage checks them; none when
    they do not pass (a header written over the binary port): one such task must not fail a receive."""
    try:
        return _message_attributes(json.loads(stored))
    except (ValueError, sqs_errors.SqsError):
        return {}


def _sequence_number(pid: str) -> str:
    return pid.split(".", 1)[0].zfill(20)


def _entries(params: dict[str, Any], action: str) -> list[dict[str, Any]]:
    entries = params.get("Entries")
    if entries is None:
        raise sqs_errors.missing_parameter("Entries")
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise sqs_errors.invalid_parameter("Entries must be a list of maps")
    if not entries:
        raise sqs_errors.empty_batch(action)
    if len(entries) > MAX_BATCH:
        raise sqs_errors.too_many_entries(len(entries))
    seen: set[str] = set()
    for entry in entries:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or not _ENTRY_ID_RE.fullmatch(entry_id):
            raise sqs_errors.invalid_batch_entry_id()
        if entry_id in seen:
            raise sqs_errors.ids_not_distinct(entry_id)
        seen.add(entry_id)
    return entries


def _message_attributes(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise sqs_errors.invalid_parameter("MessageAttributes must be a map")
    if len(value) > MAX_MESSAGE_ATTRIBUTES:
        raise sqs_errors.invalid_parameter(
            f"Number of message attributes [{len(value)}] exceeds the allowed maximum [{MAX_MESSAGE_ATTRIBUTES}]."
        )
    checked: dict[str, Any] = {}
    for name, attribute in value.items():
        if not _ATTRIBUTE_NAME_RE.fullmatch(name) or name.lower().startswith(("aws.", "amazon.")):
            raise sqs_errors.invalid_parameter(
                f"The message attribute name '{name[:256]}' is invalid. Attribute name can contain A-Z, a-z, 0-9, "
                "underscore (_), hyphen (-), and period (.) characters."
            )
        if not isinstance(attribute, dict):
            raise sqs_errors.invalid_parameter(f"The message attribute '{name}' must be a map")
        data_type = attribute.get("DataType")
        if not isinstance(data_type, str) or not data_type:
            raise sqs_errors.invalid_parameter(
                f"The message attribute '{name}' must contain non-empty message attribute type."
            )
        kind = data_type.split(".", 1)[0]
        if kind not in ("String", "Number", "Binary"):
            raise sqs_errors.invalid_parameter(
                f"The message attribute '{name}' has an invalid message attribute type, the set of supported type "
                "prefixes is Binary, Number, and String."
            )
        field = "BinaryValue" if kind == "Binary" else "StringValue"
        content = attribute.get(field)
        if not isinstance(content, str) or content == "":
            raise sqs_errors.invalid_parameter(
                f"The message attribute '{name}' must contain non-empty message attribute value for message "
                f"attribute type '{data_type}'."
            )
        if kind == "Binary":
            try:
                base64.b64decode(content, validate=True)
            except (ValueError, binascii.Error):
                raise sqs_errors.invalid_parameter(f"The message attribute '{name}' has an invalid binary value.") from None
        checked[name] = {"DataType": data_type, field: content}
    return checked


def _trace_header(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    trace = value.get("AWSTraceHeader")
    if isinstance(trace, dict) and isinstance(trace.get("StringValue"), str):
        return trace["StringValue"]
    return None


def _filter_attributes(attributes: dict[str, Any], wanted: list[str]) -> dict[str, Any]:
    if "All" in wanted or ".*" in wanted:
        return attributes
    chosen: dict[str, Any] = {}
    for name, value in attributes.items():
        for pattern in wanted:
            if name == pattern or (pattern.endswith(".*") and name.startswith(pattern[:-1])):
                chosen[name] = value
                break
    return chosen
