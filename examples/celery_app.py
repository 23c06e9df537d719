"""A Celery app on Kittiwake: its broker URL changed, its transport named once."""

from celery import Celery

import kittiwake.kombu  # names the transport: a process that only sends tasks needs it (see above)

app = Celery("celery_app", broker="kittiwake://127.0.0.1:7370", backend="rpc://")  # or $CELERY_BROKER_URL
app.conf.task_acks_late = True  # ack after the task ran: a worker killed mid-task leaves it to another


@app.task
def add(x, y):
    return x + y
