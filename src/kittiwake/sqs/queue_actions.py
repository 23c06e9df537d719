"""The SQS actions on queues: CreateQueue, GetQueueUrl, ListQueues, DeleteQueue, PurgeQueue,
GetQueueAttributes, SetQueueAttributes.

Each turns into protocol requests run through the broker's group commit
(`context.ActionBase`); names are `naming`'s, a queue's attributes the
registry's (`queue_registry`). PurgeQueue and DeleteQueue delete every
Kittiwake queue of the SQS queue (its own, its delayed messages', a FIFO
queue's groups'). A RedrivePolicy given to CreateQueue or SetQueueAttributes
needs produce on its target (`redrive.RedriveRights`).
"""

from __future__ import annotations

import base64
from typing import Any

from kittiwake.broker.access import ANY
from kittiwake.broker.local_calls import request_id
from kittiwake.protocol import messages as m
from kittiwake.sqs import naming, rights, sqs_errors
from kittiwake.sqs.context import ADMIN_ONLY, ActionBase, Context, decode_token, require, string_map
from kittiwake.sqs.queue_registry import READABLE, SqsQueue, finite_int


class QueueActions(ActionBase):
    """The SQS actions on queues of one broker."""


    async def CreateQueue(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        name = params.get("QueueName")
        if name is None:
            raise sqs_errors.missing_parameter("QueueName")
        attributes = string_map(params.get("Attributes"), "Attributes")
        require(ctx, ADMIN_ONLY, str(name))
        self.redrive_rights.check_policy(ctx.principal, attributes)
        queue = await self.registry.create(naming.validate_queue_name(name), attributes, ctx.user)
        return {"QueueUrl": naming.queue_url(ctx.host, queue.name)}

    async def GetQueueUrl(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        name = params.get("QueueName")
        if not isinstance(name, str):
            raise sqs_errors.missing_parameter("QueueName")
        require(ctx, ANY, name)
        queue = await self.registry.get(name)
        return {"QueueUrl": naming.queue_url(ctx.host, queue.name)}

    async def ListQueues(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        prefix = params.get("QueueNamePrefix")
        names = self.registry.names(prefix if isinstance(prefix, str) else None)
        if ctx.principal is not None:  # a user sees the queues it has some permission on
            principal = ctx.principal
            names = [name for name in names if any(rights.may_use(principal, permission, name) for permission in ANY)]
        max_results = params.get("MaxResults")
        result: dict[str, Any] = {}
        if max_results is not None:
            limit = finite_int(max_results, "MaxResults", 1, 1000)
            token = params.get("NextToken")
            if isinstance(token, str) and token:
                after = decode_token(token)
                names = [name for name in names if name > after]
            if len(names) > limit:
                names = names[:limit]
                result["NextToken"] = base64.urlsafe_b64encode(names[-1].encode()).decode()
        else:
            names = names[:1000]
        if names:
            result["QueueUrls"] = [naming.queue_url(ctx.host, name) for name in names]
        return result

    async def DeleteQueue(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        queue = await self.queue_of(params, ctx, ADMIN_ONLY)
        await self._purge(queue, ctx)
        if queue.fifo:  # a queue created again under this name starts with no deduplication history
            markers = await self.call(m.ListQueues(id=request_id(), op="list_queues",
                                                   pattern=f"{naming.DEDUP_PREFIX}{queue.name}/*", limit=1_000_000), ctx)
            for info in markers:
                await self.call(m.DeleteQueue(id=request_id(), op="delete_queue", queue=info.queue), ctx)
        await self.registry.delete(queue.name)
        return {}

    async def PurgeQueue(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        await self._purge(await self.queue_of(params, ctx, ADMIN_ONLY), ctx)
        return {}

    async def _purge(self, queue: SqsQueue, ctx: Context) -> None:
        for name in await self._kittiwake_queues(queue, ctx):
            await self.call(m.DeleteQueue(id=request_id(), op="delete_queue", queue=name), ctx)

    async def _kittiwake_queues(self, queue: SqsQueue, ctx: Context) -> list[str]:
        if queue.fifo:
            return [info.queue for info in await self._group_infos(queue, ctx)]
        return [queue.name, naming.delayed_queue(queue.name)]

    async def GetQueueAttributes(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        queue = await self.queue_of(params, ctx, ANY)
        wanted = params.get("AttributeNames") or []
        if not isinstance(wanted, list):
            raise sqs_errors.invalid_parameter("AttributeNames must be a list")
        for name in wanted:
            if name != "All" and name not in READABLE:
                raise sqs_errors.invalid_attribute_name(str(name))
        if not wanted:
            return {}
        everything = "All" in wanted
        values = dict(queue.attributes)
        values["QueueArn"] = naming.queue_arn(ctx.region, queue.name)
        values["CreatedTimestamp"] = str(queue.created)
        values["LastModifiedTimestamp"] = str(queue.modified)
        if everything or any(name.startswith("ApproximateNumber") for name in wanted):
            values.update(await self._counts(queue, ctx))
        chosen = {key: value for key, value in values.items() if everything or key in wanted}
        return {"Attributes": chosen} if chosen else {}

    async def _counts(self, queue: SqsQueue, ctx: Context) -> dict[str, str]:
        visible = in_flight = delayed = 0
        if queue.fifo:
            infos = await self._group_infos(queue, ctx)
        else:
            infos = await self.call(m.Stats(id=request_id(), op="stats", sample=0,
                                            queues=[queue.name, naming.delayed_queue(queue.name)]), ctx)
        for info in infos:
            if info.queue == naming.delayed_queue(queue.name):
                delayed += info.size - info.leased
                in_flight += info.leased
            elif naming.owns(queue.name, info.queue) and not info.queue.endswith(".dead"):
                visible += info.size - info.leased
                in_flight += info.leased
        return {
            "ApproximateNumberOfMessages": str(visible),
            "ApproximateNumberOfMessagesNotVisible": str(in_flight),
            "ApproximateNumberOfMessagesDelayed": str(delayed),
        }

    async def SetQueueAttributes(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        queue = await self.queue_of(params, ctx, ADMIN_ONLY)
        attributes = string_map(params.get("Attributes"), "Attributes")
        self.redrive_rights.check_policy(ctx.principal, attributes)
        await self.registry.set_attributes(queue.name, attributes, ctx.user)
        return {}
