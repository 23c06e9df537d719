"""A small shop's tasks, run by real `kittiwake worker` processes while the dashboard's screenshot is taken.

Sending mail and resizing images take a little while; charging an order fails
now and then (a declined card), so the page has dead letters to show. The
reports wait on an index that no worker builds, so some tasks are blocked.
"""

from __future__ import annotations

import random
import time

from kittiwake.app import App

app = App()


@app.task(queue="emails.send", ignore_result=True)
def send_email(to: str, template: str = "receipt") -> str:
    time.sleep(random.uniform(0.02, 0.12))
    return f"sent {template} to {to}"


@app.task(queue="images.resize", ignore_result=True)
def resize_image(name: str, width: int) -> str:
    time.sleep(random.uniform(0.05, 0.3))
    return f"{name}@{width}"


@app.task(queue="orders.charge", max_attempts=2, ignore_result=True)
def charge_order(order: int, cents: int) -> int:
    time.sleep(random.uniform(0.02, 0.08))
    if order % 17 == 4:
        raise ValueError(f"card declined for order {order}")
    return cents


@app.task(queue="search.index", ignore_result=True)
def index_products(shard: int) -> int:
    return shard


@app.task(queue="reports.daily", ignore_result=True)
def daily_report(day: str) -> str:
    return day
