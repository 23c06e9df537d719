"""An SQS-compatible HTTP API, a face of the broker (`kittiwake broker --sqs-port`).

`face` plugs it into a broker (`kittiwake.broker.faces`), `service` speaks AWS's JSON 1.0 protocol on the broker's HTTP port
(`kittiwake.broker.http_server`), `queue_actions` and `message_actions` map each
SQS action (on `context`'s base: caller, rights, calls) onto protocol requests run through the broker's group commit (`kittiwake.broker.local_calls`),
`queue_registry` keeps queue attributes, `redrive` decides which
dead-letter queue a user may have its queue's messages moved into, `sigv4`
checks signatures, `naming` maps SQS names, receipt handles and message ids
onto Kittiwake's, `sqs_errors` words the errors.
"""
