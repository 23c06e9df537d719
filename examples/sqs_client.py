"""Code written for Amazon SQS, run against a Kittiwake broker's SQS API (`kittiwake sqs`)."""

import os

import boto3

endpoint = os.environ.get("KITTIWAKE_SQS_URL", "http://127.0.0.1:9324")
sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="any", aws_secret_access_key="any")  # signatures are not checked
url = sqs.create_queue(QueueName="emails")["QueueUrl"]
sqs.send_message(QueueUrl=url, MessageBody='{"to": "ada@example.com"}',
                 MessageAttributes={"kind": {"DataType": "String", "StringValue": "welcome"}})
for message in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, MaxNumberOfMessages=10,
                                   MessageAttributeNames=["All"]).get("Messages", []):
    print(message["Body"], message["MessageAttributes"]["kind"]["StringValue"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
