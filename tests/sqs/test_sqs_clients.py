"""The SQS API with clients other than the conformance script: the AWS CLI, unchanged, and raw HTTP.

The AWS CLI runs as `python -m awscli` from this interpreter (its botocore
is the one boto3 uses). The raw-HTTP tests send what no SDK would: bodies
that are not JSON, unknown actions, the wrong content type, bodies over the
limit, bytes that are not HTTP; each gets its error and the broker keeps
serving.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("awscli")

from kittiwake import testing  # noqa: E402
from support.broker_process import BrokerProcess  # noqa: E402

JSON_TYPE = "application/x-amz-json-1.0"


@pytest.fixture(scope="module")
def sqs_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module (each test uses queues of its own names): a broker start each is slow."""
    process = BrokerProcess(tmp_path_factory.mktemp("sqs-clients") / "data", extra_args=["--sqs-port", "0"])
    try:
        yield process
    finally:
        process.terminate()


def aws(broker: BrokerProcess, *args: str) -> Any:
    env = dict(os.environ, AWS_ACCESS_KEY_ID="cli", AWS_SECRET_ACCESS_KEY="secret", AWS_DEFAULT_REGION="eu-west-1",
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    done = subprocess.run(
        [sys.executable, "-m", "awscli", "--endpoint-url", broker.sqs_endpoint, "--output", "json", "sqs", *args],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def test_the_aws_cli_sends_receives_and_deletes(sqs_broker: BrokerProcess) -> None:
    url = aws(sqs_broker, "create-queue", "--queue-name", "cli-jobs")["QueueUrl"]
    assert url == f"{sqs_broker.sqs_endpoint}/000000000000/cli-jobs"
    sent = aws(sqs_broker, "send-message", "--queue-url", url, "--message-body", "hello from the CLI",
               "--message-attributes", '{"kind": {"DataType": "String", "StringValue": "greeting"}}')
    received = aws(sqs_broker, "receive-message", "--queue-url", url, "--message-attribute-names", "All",
                   "--attribute-names", "All", "--wait-time-seconds", "1")
    (message,) = received["Messages"]
    assert message["MessageId"] == sent["MessageId"]
    assert message["Body"] == "hello from the CLI"
    assert message["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert message["Attributes"]["SenderId"] == "cli"
    assert aws(sqs_broker, "delete-message", "--queue-url", url, "--receipt-handle", message["ReceiptHandle"]) is None
    attributes = aws(sqs_broker, "get-queue-attributes", "--queue-url", url, "--attribute-names", "All")["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"
    assert attributes["QueueArn"] == "arn:aws:sqs:eu-west-1:000000000000:cli-jobs"


# ------------------------------------------------------------------ raw HTTP


def post(broker: BrokerProcess, body: bytes, *, target: str | None = "AmazonSQS.ListQueues",
         content_type: str | None = JSON_TYPE, method: str = "POST") -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", broker.sqs_port, timeout=10)
    headers = {}
    if target is not None:
        headers["X-Amz-Target"] = target
    if content_type is not None:
        headers["Content-Type"] = content_type
    try:
        connection.request(method, "/", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def error_type(body: bytes) -> str:
    return json.loads(body)["__type"].rsplit("#", 1)[-1]


def test_bad_requests_get_sqs_errors_and_the_broker_keeps_serving(sqs_broker: BrokerProcess) -> None:
    status, headers, body = post(sqs_broker, b"{not json")
    assert (status, error_type(body)) == (400, "SerializationException")
    status, _, body = post(sqs_broker, b"[1, 2]")
    assert (status, error_type(body)) == (400, "SerializationException")
    status, headers, body = post(sqs_broker, b"{}", target="AmazonSQS.LaunchRocket")
    assert (status, error_type(body)) == (400, "InvalidAction")
    assert headers["x-amzn-query-error"] == "AWS.SimpleQueueService.UnsupportedOperation;Sender"
    status, _, body = post(sqs_broker, b"{}", target=None)
    assert (status, error_type(body)) == (400, "InvalidAction")
    status, _, body = post(sqs_broker, b"Action=ListQueues", content_type="application/x-www-form-urlencoded")
    assert (status, error_type(body)) == (400, "UnsupportedMediaType")
    assert b"JSON 1.0" in body
    status, _, body = post(sqs_broker, b"{}", content_type=None)
    assert (status, error_type(body)) == (400, "MissingContentType")
    status, _, _ = post(sqs_broker, b"", method="GET")
    assert status == 405
    status, _, body = post(sqs_broker, json.dumps({"QueueUrl": 5, "MessageBody": "x"}).encode(),
                           target="AmazonSQS.SendMessage")
    assert status == 400
    status, _, body = post(sqs_broker, json.dumps({"QueueName": "q", "Attributes": "nope"}).encode(),
                           target="AmazonSQS.CreateQueue")
    assert (status, error_type(body)) == (400, "InvalidParameterValue")
    status, _, body = post(sqs_broker, b"[" * 100_000, target="AmazonSQS.ListQueues")
    assert (status, error_type(body)) == (400, "SerializationException")
    status, _, body = post(sqs_broker, b"{}")
    assert status == 200 and isinstance(json.loads(body), dict)
    assert sqs_broker.alive()


def test_a_huge_body_gets_413(sqs_broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", sqs_broker.sqs_port), timeout=10) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: AmazonSQS.ListQueues\r\nContent-Type: "
                     + JSON_TYPE.encode() + b"\r\nContent-Length: " + str(20 * 1024 * 1024).encode() + b"\r\n\r\n"
                     + b"x" * 65536)
        answer = sock.recv(4096)  # at once: the Content-Length is enough, the body is not read
    assert answer.startswith(b"HTTP/1.1 413")
    assert post(sqs_broker, b"{}")[0] == 200


def test_bytes_that_are_not_http_get_400(sqs_broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", sqs_broker.sqs_port), timeout=10) as sock:
        sock.sendall(b"\x00\x01\x02 garbage\r\n\r\n")
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400")
    assert post(sqs_broker, b"{}")[0] == 200


def test_requests_on_one_connection_are_answered_in_turn(sqs_broker: BrokerProcess) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", sqs_broker.sqs_port, timeout=10)
    try:
        for name in ("keep-a", "keep-b", "keep-c"):
            connection.request("POST", "/", body=json.dumps({"QueueName": name}),
                               headers={"X-Amz-Target": "AmazonSQS.CreateQueue", "Content-Type": JSON_TYPE})
            response = connection.getresponse()
            assert response.status == 200
            assert json.loads(response.read())["QueueUrl"].endswith("/" + name)
    finally:
        connection.close()


def test_a_long_poll_whose_client_hangs_up_takes_no_message(sqs_broker: BrokerProcess) -> None:
    status, _, body = post(sqs_broker, json.dumps({"QueueName": "abandoned"}).encode(), target="AmazonSQS.CreateQueue")
    url = json.loads(body)["QueueUrl"]
    receive = json.dumps({"QueueUrl": url, "WaitTimeSeconds": 20}).encode()
    with socket.create_connection(("127.0.0.1", sqs_broker.sqs_port), timeout=10) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: AmazonSQS.ReceiveMessage\r\n"
                     b"Content-Type: " + JSON_TYPE.encode() + b"\r\nContent-Length: "
                     + str(len(receive)).encode() + b"\r\n\r\n" + receive)
        # the broker has the request once a request sent after it on another connection is answered
        assert post(sqs_broker, b"{}")[0] == 200
    post(sqs_broker, json.dumps({"QueueUrl": url, "MessageBody": "for someone listening"}).encode(),
         target="AmazonSQS.SendMessage")
    status, _, body = post(sqs_broker, json.dumps({"QueueUrl": url, "WaitTimeSeconds": 5}).encode(),
                           target="AmazonSQS.ReceiveMessage")
    assert [message["Body"] for message in json.loads(body)["Messages"]] == ["for someone listening"]


def test_kittiwake_sqs_is_a_broker_with_the_sqs_port_on(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "kittiwake", "sqs"]
    with testing.BrokerProcess(tmp_path / "data", args=["--sqs-port", "0"], command=command) as broker:
        assert broker.listening is not None and broker.listening.host == "127.0.0.1", broker.listening
        assert broker.sqs_port is not None
        connection = http.client.HTTPConnection("127.0.0.1", broker.sqs_port, timeout=10)
        connection.request("POST", "/", body=b"{}", headers={"X-Amz-Target": "AmazonSQS.ListQueues",
                                                             "Content-Type": JSON_TYPE})
        assert connection.getresponse().status == 200
        assert broker.terminate() == 0


PARAMETERS = ["QueueUrl", "QueueName", "Attributes", "MessageBody", "DelaySeconds", "MessageAttributes",
              "MessageGroupId", "MessageDeduplicationId", "Entries", "ReceiptHandle", "VisibilityTimeout",
              "MaxNumberOfMessages", "WaitTimeSeconds", "AttributeNames", "MessageAttributeNames",
              "QueueNamePrefix", "MaxResults", "NextToken", "MessageSystemAttributeNames"]
ODD_VALUES: list[Any] = [
    None, 0, -1, 1e300, "x", "", [], {}, [1], {"a": 1}, True, "kw1.!!!", "kw1.WyJhIiwiYiIsMF0",
    [{"Id": "a"}], [{"Id": "a", "MessageBody": 5}], [{"Id": "a", "ReceiptHandle": 5, "VisibilityTimeout": "z"}],
    {"a": {"DataType": "Binary", "BinaryValue": "!!"}}, {"a": {"DataType": 5}}, {"VisibilityTimeout": []},
    {"DelaySeconds": "5", "RedrivePolicy": "{}"}, ["All"], "9" * 400,
]


def test_parameters_of_the_wrong_shape_get_client_errors_never_5xx(sqs_broker: BrokerProcess) -> None:
    import random

    urls = [json.loads(post(sqs_broker, json.dumps(body).encode(), target="AmazonSQS.CreateQueue")[2])["QueueUrl"]
            for body in ({"QueueName": "odd"}, {"QueueName": "odd.fifo", "Attributes": {"FifoQueue": "true"}})]
    actions = ["CreateQueue", "GetQueueUrl", "ListQueues", "DeleteQueue", "PurgeQueue", "GetQueueAttributes",
               "SetQueueAttributes", "SendMessage", "SendMessageBatch", "ReceiveMessage", "DeleteMessage",
               "DeleteMessageBatch", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch"]
    chooser = random.Random(7)
    for _ in range(300):
        action = chooser.choice(actions)
        params = {key: chooser.choice(ODD_VALUES + urls) for key in chooser.sample(PARAMETERS, chooser.randint(1, 5))}
        if chooser.random() < 0.7:
            params["QueueUrl"] = chooser.choice(urls)
        status, _, body = post(sqs_broker, json.dumps(params).encode(), target=f"AmazonSQS.{action}")
        assert status < 500, (action, params, body)
    assert sqs_broker.alive()


def test_a_long_poll_ends_with_a_delayed_message_falling_due(sqs_broker: BrokerProcess) -> None:
    url = json.loads(post(sqs_broker, b'{"QueueName": "later"}', target="AmazonSQS.CreateQueue")[2])["QueueUrl"]
    post(sqs_broker, json.dumps({"QueueUrl": url, "MessageBody": "in a second", "DelaySeconds": 1}).encode(),
         target="AmazonSQS.SendMessage")
    status, _, body = post(sqs_broker, json.dumps({"QueueUrl": url, "WaitTimeSeconds": 10}).encode(),
                           target="AmazonSQS.ReceiveMessage")
    assert [message["Body"] for message in json.loads(body)["Messages"]] == ["in a second"]


def test_tasks_put_behind_an_sqs_queue_over_the_binary_port_never_fail_a_receive(sqs_broker: BrokerProcess) -> None:
    # a producer on the binary port may write any header and pid there: a task whose stored message
    # attributes are not JSON failed every receive that asked for attributes with a 500 (and kept the
    # messages it had leased invisible), a delayed task whose pid is no time failed every long-poll
    from kittiwake import Client

    url = json.loads(post(sqs_broker, b'{"QueueName": "poisoned"}', target="AmazonSQS.CreateQueue")[2])["QueueUrl"]
    with Client(sqs_broker.url) as client:
        client.enqueue("poisoned", b"odd", headers={"sqs-attrs": "not json"})
        client.enqueue("poisoned", b"odd too", headers={"sqs-attrs": '{"a": {"DataType": "Nope"}}'})
        client.enqueue("poisoned.delayed", b"never due", pid="zzz-not-a-time")
    post(sqs_broker, json.dumps({"QueueUrl": url, "MessageBody": "fine", "MessageAttributes": {
        "k": {"DataType": "String", "StringValue": "v"}}}).encode(), target="AmazonSQS.SendMessage")
    status, _, body = post(sqs_broker, json.dumps({"QueueUrl": url, "MaxNumberOfMessages": 10,
                                                   "MessageAttributeNames": ["All"]}).encode(),
                           target="AmazonSQS.ReceiveMessage")
    assert status == 200, body
    messages = {message["Body"]: message for message in json.loads(body)["Messages"]}
    assert sorted(messages) == ["fine", "odd", "odd too"]
    assert "MessageAttributes" not in messages["odd"] and messages["fine"]["MessageAttributes"]["k"]["StringValue"] == "v"
    status, _, body = post(sqs_broker, json.dumps({"QueueUrl": url, "WaitTimeSeconds": 1}).encode(),
                           target="AmazonSQS.ReceiveMessage")
    assert status == 200 and "Messages" not in json.loads(body), body
