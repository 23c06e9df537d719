"""The errors of the SQS API, as AWS's JSON 1.0 protocol words them.

An error answer is HTTP 400 (500 for the server's own faults) with a JSON
body `{"__type": "com.amazonaws.sqs#<Shape>", "message": ...}` and the
header `x-amzn-query-error: <query code>;Sender`. botocore takes the error
code from that header when it is there, which is what makes boto3 raise the
modelled exception (`client.exceptions.QueueDoesNotExist` has the query code
`AWS.SimpleQueueService.NonExistentQueue`); `__type` is what clients of the
JSON protocol without that rule read. Codes and messages follow SQS's own.
"""

from __future__ import annotations


class SqsError(Exception):
    """An SQS error answer: `shape` names it in `__type`, `code` is its query error code."""

    def __init__(self, shape: str, message: str, *, code: str | None = None, status: int = 400, sender: bool = True) -> None:
        super().__init__(message)
        self.shape = shape
        self.code = code or shape
        self.message = message
        self.status = status
        self.sender = sender


def queue_does_not_exist() -> SqsError:
    return SqsError("QueueDoesNotExist", "The specified queue does not exist.",
                    code="AWS.SimpleQueueService.NonExistentQueue")


def queue_already_exists() -> SqsError:
    return SqsError("QueueNameExists", "The specified queue already exists.", code="QueueAlreadyExists")


def invalid_parameter(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing_parameter(name: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.")


def invalid_attribute_name(name: str) -> SqsError:
    return SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")


def invalid_attribute_value(name: str, why: str = "") -> SqsError:
    return SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.{(' Reason: ' + why) if why else ''}")


def receipt_handle_invalid(handle: str = "") -> SqsError:
    return SqsError("ReceiptHandleIsInvalid", f'The input receipt handle "{handle[:200]}" is not a valid receipt handle.')


def message_not_inflight() -> SqsError:
    return SqsError("MessageNotInflight", "The message referred to is not in flight.",
                    code="AWS.SimpleQueueService.MessageNotInflight")


def empty_batch(action: str) -> SqsError:
    return SqsError("EmptyBatchRequest", f"There should be at least one {action}MessageBatchRequestEntry in the request.",
                    code="AWS.SimpleQueueService.EmptyBatchRequest")


def too_many_entries(count: int) -> SqsError:
    return SqsError("TooManyEntriesInBatchRequest", f"Maximum number of entries per request are 10. You have sent {count}.",
                    code="AWS.SimpleQueueService.TooManyEntriesInBatchRequest")


def ids_not_distinct(entry_id: str) -> SqsError:
    return SqsError("BatchEntryIdsNotDistinct", f"Id {entry_id} repeated.",
                    code="AWS.SimpleQueueService.BatchEntryIdsNotDistinct")


def invalid_batch_entry_id() -> SqsError:
    return SqsError("InvalidBatchEntryId", "A batch entry id can only contain alphanumeric characters, "
                    "hyphens and underscores. It can be at most 80 letters long.",
                    code="AWS.SimpleQueueService.InvalidBatchEntryId")


def batch_too_long(length: int) -> SqsError:
    return SqsError("BatchRequestTooLong", f"Batch requests cannot be longer than 1048576 bytes. You have sent {length} bytes.",
                    code="AWS.SimpleQueueService.BatchRequestTooLong")


def unknown_operation(action: str) -> SqsError:
    return SqsError("InvalidAction", f"The action {action[:100]} is not valid for this endpoint.",
                    code="AWS.SimpleQueueService.UnsupportedOperation")


def malformed(message: str) -> SqsError:
    return SqsError("SerializationException", message)


def access_denied(message: str) -> SqsError:
    return SqsError("AccessDenied", message, status=403)


def signature_mismatch(message: str) -> SqsError:
    return SqsError("SignatureDoesNotMatch", message, status=403)


def internal(message: str) -> SqsError:
    return SqsError("InternalError", message, status=500, sender=False)


def unavailable(message: str) -> SqsError:
    return SqsError("ServiceUnavailable", message, status=503, sender=False)
