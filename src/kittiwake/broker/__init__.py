"""The broker: an asyncio TCP server wiring connections to the engine and the store.

`Broker` runs inside an existing event loop; `run_broker` runs a whole broker
process until SIGTERM or SIGINT. See `server` (lifecycle), `connection`
(per-connection protocol), `group_commit` (batching, durability, long-polls),
`dispatch` (requests to engine calls), `waiters` (parked long-polls) and
`config`.
"""

from kittiwake.broker.config import BrokerConfig
from kittiwake.broker.server import Broker, run_broker

__all__ = ["Broker", "BrokerConfig", "run_broker"]
