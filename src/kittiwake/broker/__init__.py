"""The broker: an asyncio TCP server wiring connections to the engine and the store.

`Broker` runs inside an existing event loop; `run_broker` runs a whole broker
process until SIGTERM or SIGINT. See `server` (lifecycle), `connection`
(per-connection protocol), `group_commit` (when passes run, where replies
go), `passes` (one group-commit pass, pure: batching, durability, failures),
`long_polls` and `waiters` (parked long-polls), `store_health` (outages),
`dispatch` (requests to engine calls) and `config`.
"""

from kittiwake.broker.config import BrokerConfig
from kittiwake.broker.server import Broker, run_broker

__all__ = ["Broker", "BrokerConfig", "run_broker"]
