#!/usr/bin/env python3
"""Your own DynamoDB table on `postbox serve`, with secondary indexes, from boto3.

    export $(cat postbox-data/admin-access-key) AWS_DEFAULT_REGION=us-east-1
    python3 examples/python/indexes.py http://127.0.0.1:8000

Creates a table `orders` with a global secondary index by customer and date, queries it,
adds a second index by status with UpdateTable (backfilled from the items already there),
waits until it is ACTIVE and queries that one too. Exits non-zero if an answer is not the
one DynamoDB would give. The same code runs against DynamoDB itself without the endpoint.
"""

import sys
import time

import boto3

endpoint = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
table = sys.argv[2] if len(sys.argv) > 2 else "orders"
ddb = boto3.client("dynamodb", endpoint_url=endpoint)

ddb.create_table(
    TableName=table,
    BillingMode="PAY_PER_REQUEST",
    AttributeDefinitions=[
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "customer", "AttributeType": "S"},
        {"AttributeName": "placed", "AttributeType": "S"},
    ],
    KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
    GlobalSecondaryIndexes=[{
        "IndexName": "by-customer",
        "KeySchema": [{"AttributeName": "customer", "KeyType": "HASH"},
                      {"AttributeName": "placed", "KeyType": "RANGE"}],
        "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["total"]},
    }],
)
ddb.get_waiter("table_exists").wait(TableName=table)

orders = [
    ("order#1", "ada", "2026-12-01", "paid", "40"),
    ("order#2", "ada", "2026-12-03", "open", "12"),
    ("order#3", "grace", "2026-12-02", "open", "7"),
]
for pk, customer, placed, status, total in orders:
    ddb.put_item(TableName=table, Item={
        "pk": {"S": pk}, "customer": {"S": customer}, "placed": {"S": placed},
        "status": {"S": status}, "total": {"N": total}})

# Ada's orders since December 2nd, newest first: the index holds the keys and `total`.
recent = ddb.query(
    TableName=table, IndexName="by-customer", ScanIndexForward=False,
    KeyConditionExpression="customer = :c AND placed >= :d",
    ExpressionAttributeValues={":c": {"S": "ada"}, ":d": {"S": "2026-12-02"}})
print("ada since 2026-12-02:", [(i["pk"]["S"], i["total"]["N"]) for i in recent["Items"]])
assert [i["pk"]["S"] for i in recent["Items"]] == ["order#2"], recent
assert "status" not in recent["Items"][0], "an INCLUDE index holds only its attributes"

# A second index, added to the table that already has items.
ddb.update_table(
    TableName=table,
    AttributeDefinitions=[{"AttributeName": "status", "AttributeType": "S"}],
    GlobalSecondaryIndexUpdates=[{"Create": {
        "IndexName": "by-status",
        "KeySchema": [{"AttributeName": "status", "KeyType": "HASH"}],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    }}])
deadline = time.monotonic() + 60
while True:
    indexes = ddb.describe_table(TableName=table)["Table"]["GlobalSecondaryIndexes"]
    status = {i["IndexName"]: i["IndexStatus"] for i in indexes}
    if status.get("by-status") == "ACTIVE":
        break
    assert time.monotonic() < deadline, f"by-status still {status}"
    time.sleep(0.1)

open_orders = ddb.query(
    TableName=table, IndexName="by-status", KeyConditionExpression="#s = :s",
    ExpressionAttributeNames={"#s": "status"}, ExpressionAttributeValues={":s": {"S": "open"}})
print("open:", sorted(i["pk"]["S"] for i in open_orders["Items"]))
assert sorted(i["pk"]["S"] for i in open_orders["Items"]) == ["order#2", "order#3"], open_orders
print("indexes:", status)
