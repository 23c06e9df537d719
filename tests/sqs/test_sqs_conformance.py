"""The SQS API against moto: one boto3 script (`conformance_script`) run on both, results compared.

moto is a real implementation of the SQS API (in process, `mock_aws`);
Kittiwake is a broker subprocess with `--sqs-port`. Every action the broker
serves is in the script, with its error cases; ids, handles and timestamps
are masked, so what is compared is what a client can rely on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

boto3 = pytest.importorskip("boto3")
moto = pytest.importorskip("moto")

from conformance_script import run_script  # noqa: E402
from support.broker_process import BrokerProcess  # noqa: E402

# Where moto takes what SQS refuses, SQS's documented answer is expected of Kittiwake instead:
# unknown and out-of-range queue attributes (SQS: InvalidAttributeName, InvalidAttributeValue).
MOTO_LAX = {
    "create bad attribute": {"error": "InvalidAttributeName"},
    "create bad attribute value": {"error": "InvalidAttributeValue"},
    "set unknown attribute": {"error": "InvalidAttributeName"},
}

CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


def sqs_client(endpoint_url: str | None = None) -> Any:
    return boto3.client("sqs", endpoint_url=endpoint_url, **CREDENTIALS)


@pytest.fixture
def sqs_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", extra_args=["--sqs-port", "0"])
    try:
        yield process
    finally:
        process.terminate()


def moto_steps() -> list[tuple[str, Any]]:
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with moto.mock_aws():
        return run_script(sqs_client())


def test_every_action_answers_as_moto_does(sqs_broker: BrokerProcess) -> None:
    ours = run_script(sqs_client(sqs_broker.sqs_endpoint))
    reference = moto_steps()
    assert [name for name, _ in ours] == [name for name, _ in reference]
    differences = [
        f"{name}:\n  kittiwake: {mine!r}\n  moto:      {theirs!r}"
        for (name, mine), (_, theirs) in zip(ours, reference)
        if mine != MOTO_LAX.get(name, theirs)
    ]
    assert not differences, "\n".join(differences)


def test_queues_and_messages_survive_a_restart(sqs_broker: BrokerProcess) -> None:
    client = sqs_client(sqs_broker.sqs_endpoint)
    url = client.create_queue(QueueName="kept", Attributes={"VisibilityTimeout": "7"})["QueueUrl"]
    client.send_message(QueueUrl=url, MessageBody="durable",
                        MessageAttributes={"k": {"DataType": "String", "StringValue": "v"}})
    sqs_broker.kill()
    sqs_broker.restart()
    client = sqs_client(sqs_broker.sqs_endpoint)
    assert client.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"] == {
        "VisibilityTimeout": "7"
    }
    received = client.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    assert [(m["Body"], m["MessageAttributes"]) for m in received] == [
        ("durable", {"k": {"DataType": "String", "StringValue": "v"}})
    ]
