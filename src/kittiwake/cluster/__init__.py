"""The cluster: one namespace of queues over many brokers (Fabriq's design, as shared-nothing shards).

Each node of a cluster is today's broker on its own store; this package owns what turns several of
them into one: the static cluster map (`cluster_map`: the nodes, which node owns each slot, the
epoch every process reading the same file agrees on) and routing (`routing`: the pure decision of
which node a call goes to, the routing tags that keep together what must stay together, and the
spreading of FIFO tasks over live nodes). Both are sans-IO: no sockets, no store, no clock of their
own. The broker's side builds on them: `node` (a broker as a node, plugged into the broker as a
request extension, `kittiwake.broker.extensions`), `shard_guard` (the pure rule of what a node
refuses with `WRONG_SHARD`), `holdings` (which nodes hold tasks of each spread queue, sans-IO) and
`announcer` (the I/O that tells the peers). The client's side (`kw://a,b,c`, fan-out, local-first
leases) builds on the same map and routing.
"""
