"""An app that opted in to pickle: arguments and results may be any picklable object."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from kittiwake.app import App

app = App(serializer="pickle")


@dataclass(frozen=True)
class Invoice:
    number: int
    total: Fraction


@app.task(queue="pickled")
def double(invoice: Invoice) -> Invoice:
    return Invoice(invoice.number, invoice.total * 2)


@app.task(queue="pickled")
def distinct(values: list[int]) -> set[int]:
    return set(values)
