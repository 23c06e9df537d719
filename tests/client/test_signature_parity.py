"""The two clients mirror each other, and the four ways to enqueue take one task's options.

`Client` and `AsyncClient` offer the same public methods and properties, each with the same
parameters (names, kinds, defaults, annotations) and the same overloads; only a coroutine stands
where the blocking client has a function, and the async client's producer is an `AsyncProducer`.
`Client.enqueue`, `AsyncClient.enqueue`, `Producer.enqueue` and `AsyncProducer.enqueue` take the
same task parameters; a client's call also takes a `timeout`, which a producer's does not (its
caller waits on the `Sending` instead).

Signatures are read as `inspect` gives them: the modules postpone annotations, so each
annotation is the text written in the source, compared as text.
"""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any, Callable

import pytest

from kittiwake.client import AsyncClient, AsyncProducer, Client, Producer

# what a sync name stands for in the async client's annotations
ASYNC_NAMES = {"Producer": "AsyncProducer", "Sending": "AsyncSending"}
CLIENT_ONLY_ENQUEUE_PARAMETERS = ("timeout",)


def _public(cls: type) -> list[str]:
    return sorted(name for name in dir(cls) if not name.startswith("_"))


def _as_async(annotation: Any) -> Any:
    if not isinstance(annotation, str):
        return annotation
    for sync_name, async_name in ASYNC_NAMES.items():
        annotation = re.sub(rf"\b{sync_name}\b", async_name, annotation)
    return annotation


def _async_counterpart(signature: inspect.Signature) -> inspect.Signature:
    """`signature` as the async client would spell it."""
    return signature.replace(
        parameters=[parameter.replace(annotation=_as_async(parameter.annotation))
                    for parameter in signature.parameters.values()],
        return_annotation=_as_async(signature.return_annotation),
    )


def _overloads(function: Callable[..., Any]) -> list[inspect.Signature]:
    return [inspect.signature(overload) for overload in typing.get_overloads(function)]


def test_the_clients_offer_the_same_public_names() -> None:
    assert _public(Client) == _public(AsyncClient)


@pytest.mark.parametrize("name", _public(Client))
def test_each_public_method_takes_the_same_parameters(name: str) -> None:
    sync_member = inspect.getattr_static(Client, name)
    async_member = inspect.getattr_static(AsyncClient, name)
    if isinstance(sync_member, property):
        assert isinstance(async_member, property), f"AsyncClient.{name} is not a property"
        assert sync_member.fget is not None and async_member.fget is not None
        assert _async_counterpart(inspect.signature(sync_member.fget)) == inspect.signature(async_member.fget)
        return
    sync_method, async_method = getattr(Client, name), getattr(AsyncClient, name)
    assert _async_counterpart(inspect.signature(sync_method)) == inspect.signature(async_method)
    sync_overloads, async_overloads = _overloads(sync_method), _overloads(async_method)
    assert [_async_counterpart(signature) for signature in sync_overloads] == async_overloads


def _enqueue_task_parameters(cls: type) -> list[inspect.Parameter]:
    parameters = list(inspect.signature(cls.enqueue).parameters.values())
    return [parameter for parameter in parameters if parameter.name not in CLIENT_ONLY_ENQUEUE_PARAMETERS]


def test_the_four_enqueues_take_the_same_task_parameters() -> None:
    reference = _enqueue_task_parameters(Client)
    for cls in (AsyncClient, Producer, AsyncProducer):
        assert _enqueue_task_parameters(cls) == reference, f"{cls.__name__}.enqueue differs from Client.enqueue"


def test_only_the_clients_enqueue_takes_a_timeout() -> None:
    for cls in (Client, AsyncClient):
        timeout = inspect.signature(cls.enqueue).parameters["timeout"]
        assert timeout.kind is inspect.Parameter.KEYWORD_ONLY and timeout.default is None
    for cls in (Producer, AsyncProducer):
        assert "timeout" not in inspect.signature(cls.enqueue).parameters
