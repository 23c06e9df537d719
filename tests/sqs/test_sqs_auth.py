"""The SQS API on a broker with an auth file: SigV4 checked against each user's SQS secret, rights applied.

The signature check itself is tested in process against requests signed by
botocore's own signer; the rest talks to a broker subprocess with boto3.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

boto3 = pytest.importorskip("boto3")

import botocore.exceptions  # noqa: E402
from botocore.auth import SigV4Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from kittiwake.broker.http_server import HttpRequest  # noqa: E402
from kittiwake.broker.users import load_users  # noqa: E402
from kittiwake.cli.auth_command import auth  # noqa: E402
from kittiwake.sqs import sigv4  # noqa: E402
from kittiwake.sqs.sqs_errors import SqsError  # noqa: E402
from support.auth_users import write_auth_file  # noqa: E402
from support.broker_process import BrokerProcess  # noqa: E402

ALICE_SECRET = "alice-sqs-secret-0123456789"


def signed(secret: str, *, body: bytes = b"{}", url: str = "http://127.0.0.1:9324/",
           extra_headers: dict[str, str] | None = None) -> HttpRequest:
    """A request as botocore signs it, in the form the HTTP server hands it over; `extra_headers` are
    set before signing (botocore signs them, and takes X-Amz-Content-SHA256 as the payload's hash)."""
    request = AWSRequest(method="POST", url=url, data=body,
                         headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues",
                                  **(extra_headers or {})})
    SigV4Auth(Credentials("alice", secret), "sqs", "eu-west-1").add_auth(request)
    prepared = request.prepare()
    path, _, query = prepared.url.split("9324", 1)[1].partition("?")
    headers = {name.lower(): value for name, value in prepared.headers.items()}
    headers["host"] = "127.0.0.1:9324"
    return HttpRequest("POST", path or "/", query, headers, body, None)


def test_a_signature_made_with_the_secret_verifies() -> None:
    for request in (signed(ALICE_SECRET), signed(ALICE_SECRET, url="http://127.0.0.1:9324/000000000000/q?b=2&a=x%20y")):
        signature = sigv4.parse(request)
        assert (signature.access_key, signature.region, signature.service) == ("alice", "eu-west-1", "sqs")
        sigv4.verify(request, signature, ALICE_SECRET)


def test_a_wrong_secret_a_changed_body_or_an_old_date_is_refused() -> None:
    request = signed(ALICE_SECRET)
    with pytest.raises(SqsError) as wrong:
        sigv4.verify(request, sigv4.parse(request), "another-secret-0123456789")
    assert wrong.value.shape == "SignatureDoesNotMatch"
    request.body = b'{"QueueNamePrefix": "x"}'
    with pytest.raises(SqsError, match="does not match"):
        sigv4.verify(request, sigv4.parse(request), ALICE_SECRET)
    fresh = signed(ALICE_SECRET)
    with pytest.raises(SqsError) as skewed:  # as if it arrived an hour after it was signed
        sigv4.verify(fresh, sigv4.parse(fresh), ALICE_SECRET, now=time.time() + 3600)
    assert skewed.value.shape == "RequestTimeTooSkewed"
    unsigned = HttpRequest("POST", "/", "", {}, b"{}", None)
    with pytest.raises(SqsError) as missing:
        sigv4.parse(unsigned)
    assert missing.value.shape == "MissingAuthenticationToken"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_body_swapped_under_a_declared_payload_hash_is_refused() -> None:
    original = b'{"QueueNamePrefix": "alice"}'
    request = signed(ALICE_SECRET, body=original, extra_headers={"X-Amz-Content-SHA256": sha256_hex(original)})
    sigv4.verify(request, sigv4.parse(request), ALICE_SECRET)
    # the signature covers the body's hash; a signed header naming the old body's hash must not stand in for it
    request.body = b'{"QueueNamePrefix": "bob--"}'
    with pytest.raises(SqsError) as swapped:
        sigv4.verify(request, sigv4.parse(request), ALICE_SECRET)
    assert (swapped.value.shape, swapped.value.status) == ("XAmzContentSHA256Mismatch", 400)
    # nor one added after signing, even naming the body that came: an X-Amz-* header must be signed
    unsigned = signed(ALICE_SECRET, body=original)
    unsigned.headers["x-amz-content-sha256"] = sha256_hex(original)
    with pytest.raises(SqsError) as added:
        sigv4.verify(unsigned, sigv4.parse(unsigned), ALICE_SECRET)
    assert (added.value.shape, added.value.status) == ("IncompleteSignature", 403)


def test_a_signed_payload_hash_must_be_the_bodys() -> None:
    body = b'{"QueueNamePrefix": "alice"}'
    matching = signed(ALICE_SECRET, body=body, extra_headers={"X-Amz-Content-SHA256": sha256_hex(body)})
    assert "x-amz-content-sha256" in sigv4.parse(matching).signed_headers
    sigv4.verify(matching, sigv4.parse(matching), ALICE_SECRET)
    # signed by the secret's holder, but over a hash that is not the body's: what arrived was not signed
    for declared in (sha256_hex(b"another body"), "UNSIGNED-PAYLOAD", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"):
        request = signed(ALICE_SECRET, body=body, extra_headers={"X-Amz-Content-SHA256": declared})
        with pytest.raises(SqsError) as mismatch:
            sigv4.verify(request, sigv4.parse(request), ALICE_SECRET)
        assert mismatch.value.shape == "XAmzContentSHA256Mismatch", declared
        assert "x-amz-content-sha256" in mismatch.value.message


@pytest.fixture
def auth_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    path = write_auth_file(tmp_path / "users.json", {
        "alice": ("alice-token-0123456789abcdef", {"alice-*": ["all"], "shared": ["consume"],
                                                   "shared.delayed": ["consume"]}),
        "bob": ("bob-token-0123456789abcdef", {"*": ["all"]}),
    })
    result = CliRunner().invoke(auth, ["sqs-secret", "alice", "--secret", ALICE_SECRET, "--file", str(path)])
    assert result.exit_code == 0, result.output
    assert load_users(path)["alice"].sqs_secret == ALICE_SECRET
    process = BrokerProcess(tmp_path / "data", auth_file=path, extra_args=["--sqs-port", "0"])
    try:
        yield process
    finally:
        process.terminate()


def client(broker: BrokerProcess, user: str, secret: str) -> Any:
    return boto3.client("sqs", endpoint_url=broker.sqs_endpoint, region_name="eu-west-1",
                        aws_access_key_id=user, aws_secret_access_key=secret)


def error_code(call: Any) -> str:
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        call()
    return str(raised.value.response["Error"]["Code"])


def test_users_sign_with_their_sqs_secret_and_keep_to_their_rights(auth_broker: BrokerProcess) -> None:
    alice = client(auth_broker, "alice", ALICE_SECRET)
    url = alice.create_queue(QueueName="alice-jobs")["QueueUrl"]
    alice.send_message(QueueUrl=url, MessageBody="signed")
    (message,) = alice.receive_message(QueueUrl=url, AttributeNames=["SenderId"])["Messages"]
    assert (message["Body"], message["Attributes"]["SenderId"]) == ("signed", "alice")
    alice.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert error_code(lambda: alice.create_queue(QueueName="shared")) == "AccessDenied"
    assert error_code(lambda: client(auth_broker, "alice", "not-alices-secret-0000").list_queues()) == "SignatureDoesNotMatch"
    assert error_code(lambda: client(auth_broker, "bob", "bob-token-0123456789abcdef").list_queues()) == "InvalidClientTokenId"
    assert error_code(lambda: client(auth_broker, "nobody", ALICE_SECRET).list_queues()) == "InvalidClientTokenId"


def test_list_queues_shows_a_user_its_own_queues(auth_broker: BrokerProcess, tmp_path: Path) -> None:
    result = CliRunner().invoke(auth, ["sqs-secret", "bob", "--secret", "bob-sqs-secret-0123456789",
                                       "--file", str(tmp_path / "users.json")])
    assert result.exit_code == 0, result.output
    bob = client(auth_broker, "bob", "bob-sqs-secret-0123456789")
    deadline = time.monotonic() + 10
    while True:  # the broker re-reads the auth file within a second of a change
        try:
            bob.create_queue(QueueName="shared")
            break
        except botocore.exceptions.ClientError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    bob.create_queue(QueueName="bobs")
    client(auth_broker, "alice", ALICE_SECRET).create_queue(QueueName="alice-own")
    names = [url.rsplit("/", 1)[1] for url in client(auth_broker, "alice", ALICE_SECRET).list_queues()["QueueUrls"]]
    assert names == ["alice-own", "shared"]


def test_a_captured_request_replayed_with_another_body_is_refused(auth_broker: BrokerProcess) -> None:
    alice = client(auth_broker, "alice", ALICE_SECRET)
    url = alice.create_queue(QueueName="alice-replay")["QueueUrl"]
    body = json.dumps({"QueueUrl": url, "MessageBody": "pay 10"}).encode()
    request = AWSRequest(method="POST", url=auth_broker.sqs_endpoint + "/", data=body,
                         headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"})
    SigV4Auth(Credentials("alice", ALICE_SECRET), "sqs", "eu-west-1").add_auth(request)
    captured = dict(request.headers.items())
    forged = body.replace(b"pay 10", b"pay 99")  # the same length: a signed Content-Length would not tell

    def post(headers: dict[str, str], data: bytes) -> tuple[int, str]:
        return raw_post(auth_broker, headers, data)

    assert post(captured, forged) == (403, "com.amazonaws.sqs#SignatureDoesNotMatch")
    # a payload hash added after signing is not signed: refused before it is compared with anything
    assert post({**captured, "X-Amz-Content-SHA256": sha256_hex(body)}, forged) == (
        403, "com.amazonaws.sqs#IncompleteSignature")
    assert post({**captured, "X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"}, forged) == (
        403, "com.amazonaws.sqs#IncompleteSignature")
    assert post(captured, body) == (200, "")  # the request as it was signed: accepted
    received = alice.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    assert [message["Body"] for message in received["Messages"]] == ["pay 10"]


class HeadersLeftOut(SigV4Auth):
    """A signer that leaves some headers out of SignedHeaders, as a hand-made client might."""

    def __init__(self, left_out: tuple[str, ...]) -> None:
        super().__init__(Credentials("alice", ALICE_SECRET), "sqs", "eu-west-1")
        self.left_out = left_out

    def headers_to_sign(self, request: AWSRequest) -> Any:
        headers = super().headers_to_sign(request)
        for name in self.left_out:
            del headers[name]
        return headers


def raw_post(broker: BrokerProcess, headers: dict[str, str], body: bytes) -> tuple[int, str]:
    """POST / over a socket of its own: (status, the error's __type or "")."""
    host, port = broker.sqs_endpoint.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("POST", "/", body=body, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}").get("__type", "")
    finally:
        connection.close()


def test_a_captured_request_replayed_as_another_action_is_refused(auth_broker: BrokerProcess) -> None:
    # X-Amz-Target chooses the action and the body is the same for GetQueueUrl and CreateQueue: a signature
    # that did not cover it would let whoever saw the request create the queue (or delete or purge one)
    alice = client(auth_broker, "alice", ALICE_SECRET)
    body = json.dumps({"QueueName": "alice-replayed"}).encode()
    incomplete = (403, "com.amazonaws.sqs#IncompleteSignature")
    for left_out in (("X-Amz-Target",), ("Content-Type",), ("X-Amz-Target", "Content-Type")):
        request = AWSRequest(method="POST", url=auth_broker.sqs_endpoint + "/", data=body, headers={
            "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.GetQueueUrl"})
        HeadersLeftOut(left_out).add_auth(request)
        captured = dict(request.headers.items())
        signed_headers = captured["Authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
        assert not {name.lower() for name in left_out} & set(signed_headers), signed_headers
        assert raw_post(auth_broker, captured, body) == incomplete, left_out
        assert raw_post(auth_broker, {**captured, "X-Amz-Target": "AmazonSQS.CreateQueue"}, body) == incomplete
    assert error_code(lambda: alice.get_queue_url(QueueName="alice-replayed")) == "AWS.SimpleQueueService.NonExistentQueue"

    # every X-Amz-* header must be signed, but the session token AWS lets some services take unsigned
    request = AWSRequest(method="POST", url=auth_broker.sqs_endpoint + "/", data=b"{}", headers={
        "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"})
    SigV4Auth(Credentials("alice", ALICE_SECRET), "sqs", "eu-west-1").add_auth(request)
    complete = dict(request.headers.items())
    assert raw_post(auth_broker, complete, b"{}") == (200, "")
    assert raw_post(auth_broker, {**complete, "X-Amz-Something": "added"}, b"{}") == incomplete
    assert raw_post(auth_broker, {**complete, "X-Amz-Security-Token": "added"}, b"{}") == (200, "")

    # a large body is refused from the head alone when the head is not signed whole
    request = AWSRequest(method="POST", url=auth_broker.sqs_endpoint + "/", data=b"{}", headers={
        "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"})
    HeadersLeftOut(("X-Amz-Target",)).add_auth(request)
    head = "".join(f"{name}: {value}\r\n" for name, value in request.headers.items() if name.lower() != "content-length")
    host, port = auth_broker.sqs_endpoint.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST / HTTP/1.1\r\nHost: {host}:{port}\r\n{head}Content-Length: 200000\r\n\r\n".encode())
        answer = sock.recv(65536)  # the body is never sent
    assert answer.startswith(b"HTTP/1.1 403 ") and b"IncompleteSignature" in answer, answer[:300]


def test_the_signature_is_checked_before_the_body_is_parsed(auth_broker: BrokerProcess) -> None:
    # a client without credentials learns nothing from the body's shape, and costs no JSON parse
    garbage = b"{" * 100_000
    json_headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"}
    assert raw_post(auth_broker, json_headers, garbage) == (403, "com.amazonaws.sqs#MissingAuthenticationToken")
    request = AWSRequest(method="POST", url=auth_broker.sqs_endpoint + "/", data=garbage, headers=json_headers)
    SigV4Auth(Credentials("alice", "not-" + ALICE_SECRET), "sqs", "eu-west-1").add_auth(request)
    assert raw_post(auth_broker, dict(request.headers.items()), garbage) == (403, "com.amazonaws.sqs#SignatureDoesNotMatch")
    request = AWSRequest(method="POST", url=auth_broker.sqs_endpoint + "/", data=garbage, headers=json_headers)
    SigV4Auth(Credentials("alice", ALICE_SECRET), "sqs", "eu-west-1").add_auth(request)
    assert raw_post(auth_broker, dict(request.headers.items()), garbage) == (400, "com.amazonaws.sqs#SerializationException")


def test_a_right_on_an_sqs_name_alone_reaches_none_of_the_queues_behind_it(tmp_path: Path) -> None:
    # carol's grants name `shared` and `jobs.fifo` only, which on the binary port do not cover bob's
    # `shared.delayed` or `jobs.fifo/…`; through SQS she could count, receive, delete and purge them
    path = write_auth_file(tmp_path / "users.json", {
        "carol": ("carol-token-0123456789abcdef", {"shared": ["all"], "jobs.fifo": ["all"], "carol-*": ["all"]}),
        "bob": ("bob-token-0123456789abcdef", {"shared*": ["all"], "jobs.fifo*": ["all"]}),
    })
    for user in ("carol", "bob"):
        result = CliRunner().invoke(auth, ["sqs-secret", user, "--secret", f"{user}-sqs-secret-0123456789",
                                           "--file", str(path)])
        assert result.exit_code == 0, result.output
    with BrokerProcess(tmp_path / "data", auth_file=path, extra_args=["--sqs-port", "0"]) as broker:
        bob = client(broker, "bob", "bob-sqs-secret-0123456789")
        carol = client(broker, "carol", "carol-sqs-secret-0123456789")
        shared = bob.create_queue(QueueName="shared")["QueueUrl"]
        fifo = bob.create_queue(QueueName="jobs.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        bob.send_message(QueueUrl=shared, MessageBody="bob's, later", DelaySeconds=600)
        bob.send_message(QueueUrl=fifo, MessageBody="bob's payroll", MessageGroupId="payroll",
                         MessageDeduplicationId="1")
        for url in (shared, fifo):
            assert error_code(lambda: carol.receive_message(QueueUrl=url, WaitTimeSeconds=0)) == "AccessDenied"
            assert error_code(lambda: carol.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])) == "AccessDenied"
            assert error_code(lambda: carol.purge_queue(QueueUrl=url)) == "AccessDenied"
        assert error_code(lambda: carol.create_queue(QueueName="shared")) == "AccessDenied"
        assert "QueueUrls" not in carol.list_queues()  # she holds no right that covers either
        own = carol.create_queue(QueueName="carol-own")["QueueUrl"]  # `carol-*` covers carol-own.delayed too
        carol.send_message(QueueUrl=own, MessageBody="hers")
        assert [m["Body"] for m in carol.receive_message(QueueUrl=own)["Messages"]] == ["hers"]
        counts = bob.get_queue_attributes(QueueUrl=shared, AttributeNames=["All"])["Attributes"]
        assert counts["ApproximateNumberOfMessagesDelayed"] == "1"
        assert [m["Body"] for m in bob.receive_message(QueueUrl=fifo)["Messages"]] == ["bob's payroll"]
