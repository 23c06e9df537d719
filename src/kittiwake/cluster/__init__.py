"""The cluster: one namespace of queues over many brokers (Fabriq's design, as shared-nothing shards).

Each node of a cluster is today's broker on its own store; this package owns what turns several of
them into one: the static cluster map (`cluster_map`: the nodes, which node owns each slot, the
epoch every process reading the same file agrees on) and routing (`routing`: the pure decision of
which node a call goes to, the routing tags that keep together what must stay together, and the
spreading of FIFO tasks over live nodes) and growth (`growth`: what may grow into what, and where
each stored entry belongs when a map gains nodes). These are sans-IO: no sockets, no store, no clock
of their own. At the edges, for `kittiwake cluster`: `grow`, the offline move of the entries that
change node (through the stores' `TaskStore` protocol), and `status`, the nodes' state asked of each
over the client. The broker's side (serving its slots, refusing others with `WRONG_SHARD`) and the
client's (`kw://a,b,c`, fan-out, local-first leases) build on the core.
"""
