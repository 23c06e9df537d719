"""Redrive policies on a broker with an auth file: a dead-letter queue is written only with a produce right.

Users (each signs with its SQS secret): root may do anything; alice
administers `alice-*` and may produce into `shared-dlq`; bob administers
`bob-*`; carol administers `carol-*` and may only produce into `bob-inbox`.
The policy's target is checked when the policy is set (CreateQueue,
SetQueueAttributes) and again when a message is moved, against the rights
the auth file gives at that moment.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

boto3 = pytest.importorskip("boto3")

import botocore.exceptions  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from kittiwake.broker.access import Principal  # noqa: E402
from kittiwake.sqs.queue_registry import SqsQueue  # noqa: E402
from kittiwake.sqs.redrive import RedriveRights, target_of_policy  # noqa: E402
from kittiwake.sqs.sqs_errors import SqsError  # noqa: E402
from kittiwake.broker.users import parse_grants  # noqa: E402
from kittiwake.cli.auth_command import auth  # noqa: E402
from support.auth_users import write_auth_file  # noqa: E402
from support.broker_process import BrokerProcess  # noqa: E402

USERS: dict[str, tuple[str, dict[str, list[str]]]] = {
    "root": ("root-token-0123456789abcdef", {"*": ["all"]}),
    "alice": ("alice-token-0123456789abcdef", {"alice-*": ["all"], "shared-dlq": ["produce"],
                                               "shared-dlq.delayed": ["produce"]}),
    "bob": ("bob-token-0123456789abcdef", {"bob-*": ["all"]}),
    "carol": ("carol-token-0123456789abcdef", {"carol-*": ["all"], "bob-inbox": ["produce"]}),
}
RELOAD_WAIT_SECS = 10.0


def secret_of(user: str) -> str:
    return f"{user}-sqs-secret-0123456789"


def make_auth_file(path: Path) -> Path:
    write_auth_file(path, USERS)
    for user in USERS:
        result = CliRunner().invoke(auth, ["sqs-secret", user, "--secret", secret_of(user), "--file", str(path)])
        assert result.exit_code == 0, result.output
    return path


@pytest.fixture
def auth_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", auth_file=make_auth_file(tmp_path / "users.json"),
                            extra_args=["--sqs-port", "0"])
    try:
        yield process
    finally:
        process.terminate()


def client(broker: BrokerProcess, user: str) -> Any:
    return boto3.client("sqs", endpoint_url=broker.sqs_endpoint, region_name="eu-west-1",
                        aws_access_key_id=user, aws_secret_access_key=secret_of(user))


def refusal(call: Any) -> dict[str, Any]:
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        call()
    response = raised.value.response
    return {"code": response["Error"]["Code"], "status": response["ResponseMetadata"]["HTTPStatusCode"],
            "message": response["Error"]["Message"]}


def policy(broker: BrokerProcess, target: str, most: int = 1) -> str:
    arn = f"arn:aws:sqs:eu-west-1:000000000000:{target}"
    return json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": str(most)})


def url_of(broker: BrokerProcess, name: str) -> str:
    return f"{broker.sqs_endpoint}/000000000000/{name}"


def receive_counts(sqs: Any, url: str, receives: int) -> list[str]:
    """ApproximateReceiveCount of each message the next `receives` receives return (visibility 0)."""
    counts: list[str] = []
    for _ in range(receives):
        response = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, WaitTimeSeconds=1,
                                       AttributeNames=["ApproximateReceiveCount"])
        counts += [message["Attributes"]["ApproximateReceiveCount"] for message in response.get("Messages", [])]
    return counts


def waiting(sqs: Any, url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


class Users:
    """The users of an auth file as `RedriveRights` reads them: real principals, held in memory."""

    def __init__(self, rights: dict[str, dict[str, list[str]]]) -> None:
        self.by_name = {user: Principal(user, parse_grants(grants, user)) for user, grants in rights.items()}

    def principal_of(self, user: str) -> Principal | None:
        return self.by_name.get(user)

    def principals(self) -> list[Principal]:
        return list(self.by_name.values())


def test_the_rule_reads_the_target_as_the_registry_does_and_asks_the_setter_or_every_admin() -> None:
    arn = "arn:aws:sqs:eu-west-1:000000000000:bob-dlq"
    for given in ({"deadLetterTargetArn": arn}, json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2})):
        assert target_of_policy(given) == "bob-dlq"
    assert [target_of_policy(given) for given in ("", "{}", "not json", ["x"], {"deadLetterTargetArn": "x"})] == [None] * 5

    users = Users({key: value[1] for key, value in USERS.items()})
    rights = RedriveRights(users)
    with pytest.raises(SqsError) as refused:
        rights.check_policy(users.by_name["alice"], {"RedrivePolicy": {"deadLetterTargetArn": arn}})
    assert (refused.value.shape, refused.value.status) == ("AccessDenied", 403)
    rights.check_policy(users.by_name["alice"], {"RedrivePolicy": ""})  # removing a policy needs nothing more
    rights.check_policy(None, {"RedrivePolicy": {"deadLetterTargetArn": arn}})  # no auth file: nothing checked

    def queue(name: str, setter: str | None) -> SqsQueue:
        return SqsQueue(name, {}, 0, 0, setter)

    assert rights.refusal(queue("carol-q", "carol"), "bob-inbox") is None
    assert "no produce permission" in (rights.refusal(queue("alice-q", "alice"), "bob-dlq") or "")
    assert "no longer in the auth file" in (rights.refusal(queue("alice-q", "mallory"), "alice-dlq") or "")
    assert rights.refusal(queue("alice-q", None), "alice-dlq") is None  # root and alice may both write there
    assert rights.refusal(queue("alice-q", None), "shared-dlq") is None  # alice may produce there too
    assert "'alice'" in (rights.refusal(queue("alice-q", None), "bob-dlq") or "")  # root may, alice may not
    rootless = RedriveRights(Users({"alice": USERS["alice"][1]}))
    assert "no user administers" in (rootless.refusal(queue("dave-q", None), "dave-dlq") or "")
    assert RedriveRights(None).refusal(queue("alice-q", "alice"), "bob-dlq") is None


def test_a_queue_cannot_be_created_with_a_redrive_into_another_users_queue(auth_broker: BrokerProcess) -> None:
    client(auth_broker, "bob").create_queue(QueueName="bob-dlq")
    alice = client(auth_broker, "alice")
    refused = refusal(lambda: alice.create_queue(QueueName="alice-q", Attributes={
        "RedrivePolicy": policy(auth_broker, "bob-dlq")}))
    assert (refused["code"], refused["status"]) == ("AccessDenied", 403)
    assert "'alice'" in refused["message"] and "'bob-dlq'" in refused["message"]
    assert refusal(lambda: alice.get_queue_url(QueueName="alice-q"))["code"] == "AWS.SimpleQueueService.NonExistentQueue"
    # a queue of bob's that does not exist is refused alike: the answer does not tell whether it exists
    missing = refusal(lambda: alice.create_queue(QueueName="alice-q", Attributes={
        "RedrivePolicy": policy(auth_broker, "bob-nothing")}))
    assert (missing["code"], missing["status"]) == ("AccessDenied", 403)


def test_set_queue_attributes_cannot_point_a_redrive_at_another_users_queue(auth_broker: BrokerProcess) -> None:
    client(auth_broker, "bob").create_queue(QueueName="bob-dlq")
    alice = client(auth_broker, "alice")
    url = alice.create_queue(QueueName="alice-q")["QueueUrl"]
    refused = refusal(lambda: alice.set_queue_attributes(QueueUrl=url, Attributes={
        "RedrivePolicy": policy(auth_broker, "bob-dlq")}))
    assert (refused["code"], refused["status"]) == ("AccessDenied", 403)
    assert "'bob-dlq'" in refused["message"]
    assert "RedrivePolicy" not in alice.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]


def test_a_redrive_into_a_queue_the_user_may_produce_into_moves_the_message(auth_broker: BrokerProcess) -> None:
    alice = client(auth_broker, "alice")
    dlq = alice.create_queue(QueueName="alice-dlq")["QueueUrl"]
    url = alice.create_queue(QueueName="alice-q", Attributes={"RedrivePolicy": policy(auth_broker, "alice-dlq")})["QueueUrl"]
    alice.send_message(QueueUrl=url, MessageBody="poison")
    assert receive_counts(alice, url, 2) == ["1"]  # the second receive moved it
    assert [m["Body"] for m in alice.receive_message(QueueUrl=dlq, WaitTimeSeconds=1)["Messages"]] == ["poison"]

    # produce alone is enough: carol may write into bob-inbox, so her queue may dead-letter into it
    bob = client(auth_broker, "bob")
    inbox = bob.create_queue(QueueName="bob-inbox")["QueueUrl"]
    carol = client(auth_broker, "carol")
    carols = carol.create_queue(QueueName="carol-q")["QueueUrl"]
    carol.set_queue_attributes(QueueUrl=carols, Attributes={"RedrivePolicy": policy(auth_broker, "bob-inbox")})
    carol.send_message(QueueUrl=carols, MessageBody="for bob")
    assert receive_counts(carol, carols, 2) == ["1"]
    assert [m["Body"] for m in bob.receive_message(QueueUrl=inbox, WaitTimeSeconds=1)["Messages"]] == ["for bob"]


def test_a_redrive_stops_when_its_setter_loses_the_produce_right(auth_broker: BrokerProcess, tmp_path: Path) -> None:
    root = client(auth_broker, "root")
    shared = root.create_queue(QueueName="shared-dlq")["QueueUrl"]
    alice = client(auth_broker, "alice")
    url = alice.create_queue(QueueName="alice-q", Attributes={"RedrivePolicy": policy(auth_broker, "shared-dlq")})["QueueUrl"]
    result = CliRunner().invoke(auth, ["set-rights", "alice", "--rights", "alice-*=all",
                                       "--file", str(tmp_path / "users.json")])
    assert result.exit_code == 0, result.output
    deadline = time.monotonic() + RELOAD_WAIT_SECS
    while True:  # the broker re-reads the auth file within a second of a change
        try:
            alice.get_queue_url(QueueName="shared-dlq")
        except botocore.exceptions.ClientError:
            break
        assert time.monotonic() < deadline, "the broker did not take the new rights"
        time.sleep(0.1)

    alice.send_message(QueueUrl=url, MessageBody="poison")
    # past maxReceiveCount the message stays where it is, as if there were no policy, for alice
    assert receive_counts(alice, url, 3) == ["1", "2", "3"]
    # and for root too, who may write anywhere: the move is the policy's, made with its setter's right
    assert receive_counts(root, url, 1) == ["4"]
    assert waiting(root, shared) == 0
    assert "no produce permission" in auth_broker.log_tail(200)


def test_a_policy_stored_without_its_setter_redrives_only_where_every_admin_of_the_queue_may_produce(
        tmp_path: Path) -> None:
    # a broker with no auth file checks nothing: alice-x is given a policy into bob's queue there,
    # as a policy stored before redrive targets were checked would be
    open_broker = BrokerProcess(tmp_path / "data", extra_args=["--sqs-port", "0"])
    try:
        anyone = client(open_broker, "anyone")
        for name in ("bob-dlq", "alice-dlq"):
            anyone.create_queue(QueueName=name)
        anyone.create_queue(QueueName="alice-x", Attributes={"RedrivePolicy": policy(open_broker, "bob-dlq")})
        anyone.create_queue(QueueName="alice-y", Attributes={"RedrivePolicy": policy(open_broker, "alice-dlq")})
        for name in ("alice-x", "alice-y"):
            anyone.send_message(QueueUrl=url_of(open_broker, name), MessageBody=f"poison of {name}")
    finally:
        open_broker.terminate()

    broker = BrokerProcess(tmp_path / "data", auth_file=make_auth_file(tmp_path / "users.json"),
                           extra_args=["--sqs-port", "0"])
    try:
        root = client(broker, "root")
        # alice administers alice-x and may not write into bob-dlq: whoever set it, the move is refused
        assert receive_counts(root, url_of(broker, "alice-x"), 2) == ["1", "2"]
        assert waiting(root, url_of(broker, "bob-dlq")) == 0
        # every admin of alice-y (root, alice) may write into alice-dlq: that policy goes on working
        alice = client(broker, "alice")
        assert receive_counts(alice, url_of(broker, "alice-y"), 2) == ["1"]
        assert waiting(alice, url_of(broker, "alice-dlq")) == 1
    finally:
        broker.terminate()


def test_a_dead_letter_queues_redrive_allow_policy_decides_which_queues_may_move_messages_into_it(
        auth_broker: BrokerProcess) -> None:
    """The target's RedriveAllowPolicy holds at once: when a RedrivePolicy is set, and at each move
    (a policy changed since stops the moves); malformed values are refused."""
    alice = client(auth_broker, "alice")

    def allow(permission: str, *sources: str) -> str:
        given: dict[str, Any] = {"redrivePermission": permission}
        if sources:
            given["sourceQueueArns"] = [f"arn:aws:sqs:eu-west-1:000000000000:{name}" for name in sources]
        return json.dumps(given)

    dlq = alice.create_queue(QueueName="alice-dlq", Attributes={"RedriveAllowPolicy": allow("byQueue", "alice-a")})["QueueUrl"]
    refused = refusal(lambda: alice.create_queue(QueueName="alice-b",
                                                 Attributes={"RedrivePolicy": policy(auth_broker, "alice-dlq")}))
    assert refused["code"] == "InvalidParameterValue" and "RedriveAllowPolicy" in refused["message"], refused
    url = alice.create_queue(QueueName="alice-a", Attributes={"RedrivePolicy": policy(auth_broker, "alice-dlq")})["QueueUrl"]
    alice.send_message(QueueUrl=url, MessageBody="first")
    assert receive_counts(alice, url, 2) == ["1"]  # allowed: moved
    assert waiting(alice, dlq) == 1

    alice.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": allow("denyAll")})
    alice.send_message(QueueUrl=url, MessageBody="second")
    assert receive_counts(alice, url, 3) == ["1", "2", "3"]  # past maxReceiveCount, not moved any more
    assert waiting(alice, dlq) == 1
    assert "RedriveAllowPolicy does not allow" in auth_broker.log_tail(200)

    for bad in ("not json", json.dumps({"redrivePermission": "sometimes"}), allow("byQueue"),
                allow("allowAll", "alice-a"), allow("byQueue", *[f"alice-{n}" for n in range(11)])):
        refused = refusal(lambda: alice.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": bad}))
        assert refused["code"] == "InvalidAttributeValue", (bad, refused)
    alice.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": ""})  # cleared: any queue may
    assert "RedriveAllowPolicy" not in alice.get_queue_attributes(QueueUrl=dlq, AttributeNames=["All"])["Attributes"]
    assert receive_counts(alice, url, 1) == []  # the second message, received a fourth time, moved
    assert waiting(alice, dlq) == 2
