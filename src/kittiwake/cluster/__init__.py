"""The cluster: one namespace of queues over many brokers (Fabriq's design, as shared-nothing shards).

Each node of a cluster is today's broker on its own store; this package owns what turns several of
them into one. The sans-IO core, with no sockets, store or clock of its own: the static cluster map
(`cluster_map`: the nodes, which node owns each slot, the epoch every process reading the same file
agrees on), routing (`routing`: which node a call goes to, the routing tags that keep together what
must stay together, the spreading of FIFO tasks over live nodes), `shard_guard` (what a node
refuses with `WRONG_SHARD`), `holdings` (which nodes hold tasks of each spread queue), `merge`
(merging what several nodes answered) and growth (`growth`: what may grow into what, and where each
stored entry belongs when a map gains nodes).

At the edges: `node` (a broker as a node, plugged into the broker as a request extension,
`kittiwake.broker.extensions`), `announcer` (telling the peers what this node holds) and
`dashboard` (the source of the dashboard's cluster page, asking the peers what they hold); for
`kittiwake cluster`, `grow` (the offline move of the entries that change node, through the stores'
`TaskStore` protocol) and `status` (the nodes' state, asked of each over the client). The client's
side (`kw://a,b,c`: `kittiwake.client.cluster_channel`, over the pure `cluster_router`) builds on the
same map and routing.
"""
