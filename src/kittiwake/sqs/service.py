"""The SQS API on the broker's HTTP port: AWS's JSON 1.0 protocol in, the actions out.

boto3 ≥ 1.34.90 and the AWS CLI v1 (≥ 1.32.90) speak it: `POST /` with
`X-Amz-Target: AmazonSQS.<Action>`, `Content-Type: application/x-amz-json-1.0`
and a JSON object of the action's parameters; the answer is a JSON object, or
an error (`sqs_errors`). Point a client at the broker with
`endpoint_url="http://HOST:SQS_PORT"`; queue URLs are
`http://HOST:SQS_PORT/000000000000/<name>` (the account id is fixed).

Signatures (SigV4). Without an auth file the broker checks no signature:
the access key id a request was signed with is only read (it becomes the
message's SenderId, and the region of its credential scope goes into queue
ARNs), so anyone who reaches the SQS port can use every queue — keep it on
loopback (the default host) or a trusted network. With an auth file every
request must be signed (`sigv4`), its body and the headers that say what it
does (`X-Amz-Target`, `Content-Type`) included, by a user holding an SQS
secret (`kittiwake auth sqs-secret USER`): access key id = the user name,
secret access key = that secret. The auth file keeps only a hash of
each user's token, and SigV4 needs the secret itself to check a signature,
which is why the SQS API has its own secret. The user's rights apply to the
SQS queue names (`context.require`), and a dead-letter queue is written only
with the produce right of the user who set the RedrivePolicy (`redrive`).

Requests in the older query protocol (form-encoded `Action=…`, boto3 before
1.34.90) are answered with an error naming the JSON protocol, whatever their
signature: only `X-Amz-Target` selects an action, never the body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from kittiwake import errors
from kittiwake.broker.http_server import HttpRequest, HttpResponse, Routes
from kittiwake.sqs import naming, sigv4, sqs_errors
from kittiwake.sqs.context import Context
from kittiwake.sqs.message_actions import MessageActions
from kittiwake.sqs.queue_actions import QueueActions
from kittiwake.broker.local_calls import LocalCalls
from kittiwake.sqs.queue_registry import QueueRegistry
from kittiwake.sqs.redrive import RedriveRights

if TYPE_CHECKING:
    from kittiwake.broker.faces import Host

log = logging.getLogger("kittiwake.sqs")

CONTENT_TYPE = "application/x-amz-json-1.0"
TARGET_PREFIX = "AmazonSQS."
DEDUP_EXPIRY_SECS = 60.0
# SDKs send bodies JSON-escaped: a 1 MiB message (or batch) of non-ASCII text is up to 6 MiB of \uXXXX
MAX_REQUEST_BYTES = 8 * 1024 * 1024
ACTIONS = (
    "CreateQueue", "GetQueueUrl", "ListQueues", "DeleteQueue", "PurgeQueue", "GetQueueAttributes",
    "SetQueueAttributes", "SendMessage", "SendMessageBatch", "ReceiveMessage", "DeleteMessage",
    "DeleteMessageBatch", "ChangeMessageVisibility", "ChangeMessageVisibilityBatch",
)

ActionHandler = Callable[[dict[str, Any], Context], Awaitable[dict[str, Any]]]


class SqsService:
    """The SQS API of one broker: its routes on the HTTP port, its registry and its upkeep."""

    def __init__(self, host: Host) -> None:
        calls = LocalCalls(host)
        self.registry = QueueRegistry(calls)
        rights = RedriveRights(host.authenticator)
        self.queues = QueueActions(calls, self.registry, rights)
        self.messages = MessageActions(calls, self.registry, host.limits.max_header_value_bytes, rights)
        self.handlers: dict[str, ActionHandler] = {
            name: getattr(self.queues, name, None) or getattr(self.messages, name) for name in ACTIONS
        }
        self.authenticator = host.authenticator  # None: no auth file, no signature is checked
        self._upkeep: asyncio.Task[None] | None = None

    async def start(self, routes: Routes) -> None:
        """Read the queues from the store and take `/` on the HTTP port."""
        await self.registry.load()
        routes.add("/", self.handle)
        self._upkeep = asyncio.get_running_loop().create_task(self._expire_dedup())

    def stop(self) -> None:
        if self._upkeep is not None:
            self._upkeep.cancel()

    async def _expire_dedup(self) -> None:
        while True:
            await asyncio.sleep(DEDUP_EXPIRY_SECS)
            try:
                await self.messages.expire_dedup()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store is failing: the next minute tries again
                log.warning("expiring SQS deduplication markers failed: %s", exc)

    async def handle(self, request: HttpRequest) -> HttpResponse:
        try:
            ctx = self._context(request)  # with an auth file: the signature is checked first of all
            action, params = _parse(request)
            handler = self.handlers.get(action)
            if handler is None:
                raise sqs_errors.unknown_operation(action)
            result = await handler(params, ctx)
        except sqs_errors.SqsError as exc:
            return error_response(exc)
        except errors.Unavailable as exc:  # the store is failing or the broker stopping: clients retry a 503
            return error_response(sqs_errors.unavailable(exc.message))
        except errors.KittiwakeError as exc:
            if exc.code == "BAD_REQUEST":
                return error_response(sqs_errors.invalid_parameter(exc.message))
            log.error("SQS request failed: %s: %s", exc.code, exc.message)
            return error_response(sqs_errors.internal(f"{exc.code}: {exc.message}"))
        return HttpResponse(200, json.dumps(result).encode(), CONTENT_TYPE, [("x-amzn-RequestId", str(uuid.uuid4()))])

    def check_head(self, request: HttpRequest) -> HttpResponse | None:
        """Before a large body is read: with an auth file, the request must be signed by a user who
        holds an SQS secret, over the headers a signature must cover (the signature itself covers the
        body, so it is checked once that arrived)."""
        if self.authenticator is None:
            return None
        try:
            signature = sigv4.parse(request)
            sigv4.require_covered(request, signature)
            if self.authenticator.sqs_credentials(signature.access_key) is None:
                raise sqs_errors.SqsError("InvalidClientTokenId", "The security token included in the request is invalid.",
                                          status=403)
        except sqs_errors.SqsError as exc:
            return error_response(exc)
        return None

    def _context(self, request: HttpRequest) -> Context:
        """Who sent the request; with an auth file, only once its signature is checked."""
        host = request.headers.get("host") or "localhost"
        if self.authenticator is None:
            sender, region = sigv4.signed_access_key(request) or ("anonymous", naming.DEFAULT_REGION)
            return Context(host=host, region=region[:64], sender=sender[:128], peer=request.peer)
        signature = sigv4.parse(request)
        credentials = self.authenticator.sqs_credentials(signature.access_key)
        if credentials is None:
            raise sqs_errors.SqsError("InvalidClientTokenId", "The security token included in the request is invalid.",
                                      status=403)
        secret, principal = credentials
        sigv4.verify(request, signature, secret)
        if request.authenticated is not None:
            request.authenticated(principal.user)  # the connection counts as the user's from now on
        return Context(host=host, region=signature.region, sender=signature.access_key, peer=request.peer,
                       principal=principal)


def _parse(request: HttpRequest) -> tuple[str, dict[str, Any]]:
    if request.method != "POST":
        raise sqs_errors.SqsError("InvalidAction", "the SQS API takes POST requests (AWS JSON 1.0 protocol)",
                                  code="AWS.SimpleQueueService.UnsupportedOperation", status=405)
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type != CONTENT_TYPE:
        raise sqs_errors.SqsError(
            "UnsupportedMediaType" if content_type else "MissingContentType",
            f"this endpoint speaks the AWS JSON 1.0 protocol (Content-Type {CONTENT_TYPE}, boto3 >= 1.34.90, "
            f"AWS CLI >= 1.32.90), not {content_type[:80] or 'a request without a Content-Type'}",
        )
    target = request.headers.get("x-amz-target", "")
    if not target.startswith(TARGET_PREFIX):
        raise sqs_errors.SqsError("InvalidAction", f"X-Amz-Target must be AmazonSQS.<Action>, got {target[:100]!r}",
                                  code="AWS.SimpleQueueService.UnsupportedOperation")
    try:
        params = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise sqs_errors.malformed(f"the body is not JSON: {str(exc)[:200]}") from None
    if not isinstance(params, dict):
        raise sqs_errors.malformed("the body must be a JSON object")
    return target[len(TARGET_PREFIX):], params


def error_response(error: sqs_errors.SqsError) -> HttpResponse:
    body = {"__type": f"com.amazonaws.sqs#{error.shape}", "message": error.message}
    fault = "Sender" if error.sender else "Receiver"
    headers = [("x-amzn-query-error", f"{error.code};{fault}"), ("x-amzn-RequestId", str(uuid.uuid4()))]
    return HttpResponse(error.status, json.dumps(body).encode(), CONTENT_TYPE, headers)
