"""An SQS-compatible HTTP API served by the broker (`kittiwake broker --sqs-port`).

`service` speaks AWS's JSON 1.0 protocol on the broker's HTTP port
(`kittiwake.broker.http_server`), `actions` maps each SQS action onto
protocol requests run through the broker's group commit (`pass_calls`),
`queue_registry` keeps queue attributes, `redrive` decides which
dead-letter queue a user may have its queue's messages moved into, `sigv4`
checks signatures, `naming` maps SQS names, receipt handles and message ids
onto Kittiwake's, `sqs_errors` words the errors.
"""
