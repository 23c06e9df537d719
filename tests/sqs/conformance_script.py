"""One boto3 script over every SQS action the broker serves, with its results normalised for comparison.

`run_script(client)` drives an SQS endpoint through every action (errors
included) and returns `[(step, result)]`; `tests/sqs/test_sqs_conformance.py`
runs it against Kittiwake and against moto (a real implementation of the SQS
API) and compares. Results are normalised: what differs between any two
runs of SQS itself (message ids, receipt handles, request ids, timestamps,
sequence numbers, the sender, the host and account in URLs and ARNs, the
words of a batch entry's failure) is masked, and lists whose order SQS does
not promise are sorted. SequenceNumber is left out: moto omits it for FIFO
messages deduplicated by content, where SQS gives one.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable

import botocore.exceptions

Steps = list[tuple[str, Any]]

MASKED_KEYS = {
    "MessageId", "ReceiptHandle", "RequestId", "SequenceNumber", "SenderId", "SentTimestamp",
    "ApproximateFirstReceiveTimestamp", "CreatedTimestamp", "LastModifiedTimestamp", "NextToken", "Message",
}
DROPPED_KEYS = {"ResponseMetadata", "SequenceNumber"}
_URL_RE = re.compile(r"^https?://[^/]+/\d+/")
_ARN_RE = re.compile(r"arn:aws:sqs:[^:]+:\d+:")


def normalise(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: ("<masked>" if key in MASKED_KEYS else normalise(item))
            for key, item in value.items()
            if key not in DROPPED_KEYS
        }
    if isinstance(value, list):
        return [normalise(item) for item in value]
    if isinstance(value, str):
        return _ARN_RE.sub("arn:aws:sqs:REGION:ACCOUNT:", _URL_RE.sub("URL/", value))
    return value


def outcome(call: Callable[[], Any]) -> Any:
    """The normalised response of a call, or `{"error": code}` of the error it raised."""
    try:
        return normalise(call())
    except botocore.exceptions.ClientError as exc:
        return {"error": exc.response["Error"]["Code"]}


def bodies(response: dict[str, Any]) -> list[str]:
    return sorted(message["Body"] for message in response.get("Messages", []))


def run_script(client: Any) -> Steps:
    steps: Steps = []

    def step(name: str, call: Callable[[], Any]) -> Any:
        result = outcome(call)
        steps.append((name, result))
        return result

    # ------------------------------------------------------------ queues
    url = client.create_queue(QueueName="orders")["QueueUrl"]
    step("create again, same attributes", lambda: client.create_queue(QueueName="orders"))
    step("create again, other attributes",
         lambda: client.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "5"}))
    step("create bad name", lambda: client.create_queue(QueueName="bad name!"))
    step("create bad attribute", lambda: client.create_queue(QueueName="x1", Attributes={"Colour": "red"}))
    step("create bad attribute value", lambda: client.create_queue(QueueName="x2", Attributes={"DelaySeconds": "9999"}))
    client.create_queue(QueueName="orders-dlq")
    client.create_queue(QueueName="other")
    step("get url", lambda: client.get_queue_url(QueueName="orders"))
    step("get url of a missing queue", lambda: client.get_queue_url(QueueName="missing"))
    for name in ("x1", "x2"):  # where moto took what SQS refuses (see MOTO_LAX)
        if name in str(client.list_queues(QueueNamePrefix=name)):
            client.delete_queue(QueueUrl=client.get_queue_url(QueueName=name)["QueueUrl"])
    step("list", lambda: {"QueueUrls": sorted(client.list_queues()["QueueUrls"])})
    step("list by prefix", lambda: {"QueueUrls": sorted(client.list_queues(QueueNamePrefix="orders")["QueueUrls"])})
    step("list none", lambda: client.list_queues(QueueNamePrefix="zzz"))
    step("list paged", lambda: client.list_queues(MaxResults=2))
    step("attributes", lambda: client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]))
    step("some attributes", lambda: client.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout", "DelaySeconds"]))
    step("no attributes", lambda: client.get_queue_attributes(QueueUrl=url))
    step("unknown attribute", lambda: client.get_queue_attributes(QueueUrl=url, AttributeNames=["Colour"]))
    step("set attributes", lambda: client.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "45"}))
    step("after set", lambda: client.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"]))
    step("set unknown attribute", lambda: client.set_queue_attributes(QueueUrl=url, Attributes={"Colour": "red"}))
    step("attributes of a missing queue",
         lambda: client.get_queue_attributes(QueueUrl=url.replace("orders", "missing"), AttributeNames=["All"]))

    # -------------------------------------------------- send and receive
    attributes = {
        "colour": {"DataType": "String", "StringValue": "blue"},
        "count": {"DataType": "Number", "StringValue": "42"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01binary"},
        "other.kind": {"DataType": "String.custom", "StringValue": "x"},
    }
    step("send", lambda: client.send_message(QueueUrl=url, MessageBody="first", MessageAttributes=attributes))
    step("send unicode", lambda: client.send_message(QueueUrl=url, MessageBody="zweite Nachricht: ü ✓"))
    step("send to a missing queue", lambda: client.send_message(QueueUrl=url.replace("orders", "missing"), MessageBody="x"))
    step("send with a bad attribute", lambda: client.send_message(
        QueueUrl=url, MessageBody="x", MessageAttributes={"a": {"DataType": "Colour", "StringValue": "x"}}))
    step("send with a dedup id to a standard queue",
         lambda: client.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d"))
    step("send with a group id to a standard queue",
         lambda: client.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g"))
    step("send too long a delay", lambda: client.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=901))
    step("attributes with two waiting", lambda: client.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]))
    received = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"],
                                      MessageSystemAttributeNames=["All"])
    steps.append(("receive all", normalise({"Messages": sorted(received["Messages"], key=lambda m: m["Body"])})))
    step("attributes with two in flight", lambda: client.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]))
    step("receive while in flight", lambda: client.receive_message(QueueUrl=url))
    handles = {message["Body"]: message["ReceiptHandle"] for message in received["Messages"]}
    step("change visibility to 0", lambda: client.change_message_visibility(
        QueueUrl=url, ReceiptHandle=handles["first"], VisibilityTimeout=0))
    again = client.receive_message(QueueUrl=url, MessageAttributeNames=["colour", "other.*"],
                                   AttributeNames=["ApproximateReceiveCount"])
    steps.append(("receive again, some attributes", normalise(again)))
    step("change visibility", lambda: client.change_message_visibility(
        QueueUrl=url, ReceiptHandle=again["Messages"][0]["ReceiptHandle"], VisibilityTimeout=60))
    step("change visibility of a bad handle", lambda: client.change_message_visibility(
        QueueUrl=url, ReceiptHandle="not-a-handle", VisibilityTimeout=10))
    step("change visibility out of range", lambda: client.change_message_visibility(
        QueueUrl=url, ReceiptHandle=again["Messages"][0]["ReceiptHandle"], VisibilityTimeout=50000))
    step("delete", lambda: client.delete_message(QueueUrl=url, ReceiptHandle=again["Messages"][0]["ReceiptHandle"]))
    step("delete a bad handle", lambda: client.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle"))
    step("change visibility batch", lambda: client.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "ok", "ReceiptHandle": handles["zweite Nachricht: ü ✓"], "VisibilityTimeout": 0},
        {"Id": "bad", "ReceiptHandle": "not-a-handle", "VisibilityTimeout": 0},
    ]))
    last = client.receive_message(QueueUrl=url)
    steps.append(("receive the second", bodies(last)))
    step("delete batch", lambda: client.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": "ok", "ReceiptHandle": last["Messages"][0]["ReceiptHandle"]},
        {"Id": "bad", "ReceiptHandle": "not-a-handle"},
    ]))
    step("receive from an empty queue", lambda: client.receive_message(QueueUrl=url))
    step("receive too many", lambda: client.receive_message(QueueUrl=url, MaxNumberOfMessages=11))

    # -------------------------------------------------------------- batch
    step("send batch", lambda: client.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "a", "MessageBody": "batch-a"},
        {"Id": "b", "MessageBody": "batch-b", "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
        {"Id": "c", "MessageBody": "batch-c", "DelaySeconds": 2},
    ]))
    step("send empty batch", lambda: client.send_message_batch(QueueUrl=url, Entries=[]))
    step("send batch of 11", lambda: client.send_message_batch(
        QueueUrl=url, Entries=[{"Id": f"m{i}", "MessageBody": "x"} for i in range(11)]))
    step("send batch with repeated ids", lambda: client.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "same", "MessageBody": "x"}, {"Id": "same", "MessageBody": "y"}]))
    step("send batch with a bad id", lambda: client.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "no spaces", "MessageBody": "x"}]))
    step("delete empty batch", lambda: client.delete_message_batch(QueueUrl=url, Entries=[]))
    first_two = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    steps.append(("receive before the delay is over", bodies(first_two)))
    time.sleep(2.2)
    delayed = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    steps.append(("receive after the delay", bodies(delayed)))
    for message in first_two.get("Messages", []) + delayed.get("Messages", []):
        client.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    # ---------------------------------------------------------- long poll
    step("long poll on an empty queue", lambda: client.receive_message(QueueUrl=url, WaitTimeSeconds=1))
    sender = threading.Timer(0.3, lambda: client.send_message(QueueUrl=url, MessageBody="late"))
    sender.start()
    woken = client.receive_message(QueueUrl=url, WaitTimeSeconds=10)
    sender.join()
    steps.append(("long poll woken by a send", bodies(woken)))
    client.delete_message(QueueUrl=url, ReceiptHandle=woken["Messages"][0]["ReceiptHandle"])

    # ------------------------------------------------------- dead letters
    dlq_url = client.get_queue_url(QueueName="orders-dlq")["QueueUrl"]
    dlq_arn = client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    step("set a redrive policy", lambda: client.set_queue_attributes(QueueUrl=url, Attributes={
        "RedrivePolicy": '{"deadLetterTargetArn": "%s", "maxReceiveCount": "2"}' % dlq_arn}))
    step("redrive policy", lambda: client.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"]))
    step("redrive to a missing queue", lambda: client.set_queue_attributes(QueueUrl=url, Attributes={
        "RedrivePolicy": '{"deadLetterTargetArn": "%s", "maxReceiveCount": "2"}' % dlq_arn.replace("orders-dlq", "gone")}))
    client.send_message(QueueUrl=url, MessageBody="poison")
    counts = []
    for _ in range(3):
        response = client.receive_message(QueueUrl=url, VisibilityTimeout=0, AttributeNames=["ApproximateReceiveCount"])
        counts.append([message["Attributes"]["ApproximateReceiveCount"] for message in response.get("Messages", [])])
        time.sleep(0.05)
    steps.append(("receive counts until dead-lettered", counts))
    moved = client.receive_message(QueueUrl=dlq_url)
    steps.append(("in the dead-letter queue", bodies(moved)))

    # ------------------------------------------------------- purge, delete
    client.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"p{i}"} for i in range(3)])
    step("purge", lambda: client.purge_queue(QueueUrl=url))
    step("receive after purge", lambda: client.receive_message(QueueUrl=url))
    step("purge a missing queue", lambda: client.purge_queue(QueueUrl=url.replace("orders", "missing")))
    other_url = client.get_queue_url(QueueName="other")["QueueUrl"]
    client.send_message(QueueUrl=other_url, MessageBody="x")
    step("delete queue", lambda: client.delete_queue(QueueUrl=other_url))
    step("url of a deleted queue", lambda: client.get_queue_url(QueueName="other"))
    step("delete a missing queue", lambda: client.delete_queue(QueueUrl=other_url))
    step("send to a deleted queue", lambda: client.send_message(QueueUrl=other_url, MessageBody="x"))

    # --------------------------------------------------------------- FIFO
    step("create fifo without the attribute", lambda: client.create_queue(QueueName="nofifo", Attributes={"FifoQueue": "true"}))
    fifo = client.create_queue(QueueName="jobs.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    step("fifo attributes", lambda: client.get_queue_attributes(QueueUrl=fifo, AttributeNames=["All"]))
    step("fifo send without group", lambda: client.send_message(QueueUrl=fifo, MessageBody="x", MessageDeduplicationId="d"))
    step("fifo send without dedup id", lambda: client.send_message(QueueUrl=fifo, MessageBody="x", MessageGroupId="g"))
    step("fifo send with a delay", lambda: client.send_message(
        QueueUrl=fifo, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="delayed", DelaySeconds=5))
    for group, number in (("a", 1), ("a", 2), ("b", 1), ("a", 3), ("b", 2)):
        step(f"fifo send {group}{number}", lambda: client.send_message(
            QueueUrl=fifo, MessageBody=f"{group}{number}", MessageGroupId=group, MessageDeduplicationId=f"{group}{number}"))
    step("fifo duplicate", lambda: client.send_message(
        QueueUrl=fifo, MessageBody="a1 again", MessageGroupId="a", MessageDeduplicationId="a1"))
    first = client.receive_message(QueueUrl=fifo, MaxNumberOfMessages=1,
                                   MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId"])
    steps.append(("fifo first", normalise(first)))
    second = client.receive_message(QueueUrl=fifo, MaxNumberOfMessages=1)
    steps.append(("fifo second: the other group", bodies(second)))
    steps.append(("fifo both groups in flight", bodies(client.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10))))
    client.delete_message(QueueUrl=fifo, ReceiptHandle=first["Messages"][0]["ReceiptHandle"])
    third = client.receive_message(QueueUrl=fifo, MaxNumberOfMessages=1)
    steps.append(("fifo next of group a", bodies(third)))
    client.change_message_visibility(QueueUrl=fifo, ReceiptHandle=third["Messages"][0]["ReceiptHandle"], VisibilityTimeout=0)
    steps.append(("fifo the same again after visibility 0", bodies(client.receive_message(QueueUrl=fifo, MaxNumberOfMessages=1))))
    batch_fifo = client.create_queue(QueueName="batch.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
    step("fifo batch, content-based dedup", lambda: client.send_message_batch(QueueUrl=batch_fifo, Entries=[
        {"Id": "one", "MessageBody": "same", "MessageGroupId": "g"},
        {"Id": "two", "MessageBody": "same", "MessageGroupId": "g"},
        {"Id": "three", "MessageBody": "different", "MessageGroupId": "g"},
    ]))
    steps.append(("fifo deduplicated batch, in order", [
        message["Body"] for message in client.receive_message(QueueUrl=batch_fifo, MaxNumberOfMessages=10)["Messages"]
    ]))

    fifo_dlq = client.create_queue(QueueName="retry-dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    fifo_dlq_arn = client.get_queue_attributes(QueueUrl=fifo_dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    step("fifo redrive to a standard queue", lambda: client.create_queue(QueueName="wrong.fifo", Attributes={
        "FifoQueue": "true", "RedrivePolicy": '{"deadLetterTargetArn": "%s", "maxReceiveCount": "1"}' % dlq_arn}))
    retry = client.create_queue(QueueName="retry.fifo", Attributes={
        "FifoQueue": "true", "ContentBasedDeduplication": "true",
        "RedrivePolicy": '{"deadLetterTargetArn": "%s", "maxReceiveCount": "1"}' % fifo_dlq_arn})["QueueUrl"]
    for body in ("p", "q"):
        client.send_message(QueueUrl=retry, MessageBody=body, MessageGroupId="g")
    steps.append(("fifo receives until p is dead-lettered", [
        bodies(client.receive_message(QueueUrl=retry, VisibilityTimeout=0)) for _ in range(2)
    ]))
    steps.append(("fifo dead-letter queue", normalise(client.receive_message(
        QueueUrl=fifo_dlq, MessageSystemAttributeNames=["MessageGroupId"]))))

    step("empty attribute name", lambda: client.get_queue_attributes(QueueUrl=url, AttributeNames=[""]))
    return steps
