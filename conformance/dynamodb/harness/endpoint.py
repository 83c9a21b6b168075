"""One endpoint under test: a DynamoDB client and a DynamoDB Streams client on one URL.

The clients are ordinary boto3 low-level clients with dummy credentials (or, for a target that
checks signatures, its access key), set up as
``common.wire`` sets up both suites' clients: client-side parameter validation and retries are
off, so the server, not the SDK, is what is tested.
"""

from __future__ import annotations

import json
import time
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from common import wire as common_wire

from . import outcome as oc
from . import wire

CONFIG = common_wire.client_config(read_timeout=30, max_pool_connections=32)

# Table operations that DynamoDB Local sometimes fails while indexes are being built, in this
# case's table or in others running at the same time: an InternalFailure (HTTP 500) that a
# second try does not give (its log shows a count racing the backfill's new columns), or its
# limit of five tables creating indexes at once. On the reference these are retried, so that a
# case compares what the reference answers, not when it ran. The target is not retried
# (unless it is DynamoDB Local too, in self-test.sh).
TABLE_OPS = {"CreateTable", "UpdateTable", "DescribeTable"}
FAULT_PAUSES = (0.2, 0.4, 0.8)
BUSY_PAUSES = (0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0, 2.0)


class Endpoint:
    def __init__(
        self, name: str, url: str, credentials: tuple[str, str] | None = None, *, retry_table_faults: bool = False
    ):
        self.name = name
        self.url = url
        self.retry_table_faults = retry_table_faults
        self.retried: list[str] = []  # "op: code" of each retried call (list.append is atomic)
        session = common_wire.session(credentials)
        self.ddb = session.client("dynamodb", endpoint_url=url, config=CONFIG)
        self.streams = session.client("dynamodbstreams", endpoint_url=url, config=CONFIG)
        if credentials:
            common_wire.vary_signatures(self.ddb)
            common_wire.vary_signatures(self.streams)

    # Raw calls -------------------------------------------------------------------------------

    def raw(self, client: Any, op: str, params: dict) -> dict:
        """Calls an operation with params already in boto3's form; raises ClientError."""
        if not (self.retry_table_faults and op in TABLE_OPS):
            return common_wire.call(client, op, params)
        faults = busy = 0
        while True:
            try:
                return common_wire.call(client, op, params)
            except ClientError as err:
                error = err.response.get("Error", {})
                code = error.get("Code")
                if code == "InternalFailure" and faults < len(FAULT_PAUSES):
                    pause, faults = FAULT_PAUSES[faults], faults + 1
                elif (
                    code == "LimitExceededException"
                    and "tables with online indexes" in error.get("Message", "")
                    and busy < len(BUSY_PAUSES)
                ):
                    pause, busy = BUSY_PAUSES[busy], busy + 1
                else:
                    raise
                self.retried.append(f"{op}: {code}")
                time.sleep(pause)

    def call(self, op: str, params: dict, names: dict[str, str], **normalise: bool) -> oc.Outcome:
        """Runs one step and returns its normalised outcome (success or error)."""
        reverse = {v: k for k, v in names.items()}
        try:
            salt = ",".join(sorted(names.values()))
            response = self.raw(self.ddb, op, wire.physical_names(params, names, salt))
        except ClientError as err:
            result = oc.failure(common_wire.from_boto(err.response))
            return oc.Outcome(wire.logical_names(result.value, reverse), wire.logical_names(result.message, reverse))
        except (BotoCoreError, ValueError, KeyError, TypeError) as err:
            return oc.client_failure(err)
        return oc.Outcome(wire.logical_names(oc.success(op, response, **normalise).value, reverse))

    def check_reachable(self) -> str | None:
        """None when the endpoint answers ListTables, else what went wrong."""
        try:
            self.raw(self.ddb, "ListTables", {"Limit": 1})
        except ClientError as err:
            return f"{err.response.get('Error', {}).get('Code')}: {err}"
        except (BotoCoreError, ValueError) as err:
            return str(err)
        return None

    # Tables ----------------------------------------------------------------------------------

    def create_table(self, physical: str, request: dict) -> oc.Outcome:
        try:
            response = self.raw(self.ddb, "CreateTable", {"TableName": physical, **request})
        except ClientError as err:
            return oc.failure(err.response)
        except (BotoCoreError, ValueError, KeyError, TypeError) as err:
            return oc.client_failure(err)
        status = response.get("TableDescription", {}).get("TableStatus")
        deadline = time.monotonic() + 60
        while status != "ACTIVE" and time.monotonic() < deadline:
            time.sleep(0.05)
            status = self.raw(self.ddb, "DescribeTable", {"TableName": physical})["Table"].get("TableStatus")
        if status != "ACTIVE":
            return oc.Outcome({"error": "TableNotActive"}, f"{physical} still {status} after 60 s")
        return oc.Outcome({"ok": {}})

    def call_streams(self, op: str, params: dict, physical: str) -> oc.Outcome:
        """A DynamoDB Streams operation on the table's stream, with "$stream", "$shard" and
        "$iterator" in the parameters replaced by this side's values."""
        try:
            params = self._stream_placeholders(params, physical)
            response = self.raw(self.streams, op, params)
        except ClientError as err:
            return oc.failure(common_wire.from_boto(err.response))
        except (BotoCoreError, ValueError, KeyError, TypeError, IndexError) as err:
            return oc.client_failure(err)
        return oc.streams_success(op, response)

    def _stream_placeholders(self, params: dict, physical: str) -> dict:
        text = json.dumps(params)
        if "$stream" in text or "$shard" in text or "$iterator" in text:
            arn = self.raw(self.ddb, "DescribeTable", {"TableName": physical})["Table"].get("LatestStreamArn", "")
            text = text.replace('"$stream"', json.dumps(arn))
            if "$shard" in text or "$iterator" in text:
                shard = self.raw(self.streams, "DescribeStream", {"StreamArn": arn})["StreamDescription"]["Shards"][0]["ShardId"]
                text = text.replace('"$shard"', json.dumps(shard))
                if "$iterator" in text:
                    iterator = self.raw(self.streams, "GetShardIterator", {
                        "StreamArn": arn, "ShardId": shard, "ShardIteratorType": "TRIM_HORIZON"})["ShardIterator"]
                    text = text.replace('"$iterator"', json.dumps(iterator))
        return json.loads(text)

    def wait_for_indexes(self, physical: str) -> oc.Outcome:
        """Waits until no global secondary index of the table is CREATING (a backfill runs
        behind UpdateTable's answer on both sides); the outcome is the indexes' names."""
        deadline = time.monotonic() + 60
        while True:
            try:
                table = self.raw(self.ddb, "DescribeTable", {"TableName": physical})["Table"]
            except ClientError as err:
                return oc.failure(err.response)
            indexes = table.get("GlobalSecondaryIndexes", [])
            if all(i.get("IndexStatus") != "CREATING" for i in indexes):
                names = sorted(i["IndexName"] for i in indexes if i.get("IndexStatus") != "DELETING")
                return oc.Outcome({"ok": {"indexes": names}})
            if time.monotonic() > deadline:
                return oc.Outcome({"error": "IndexNotActive"}, f"{physical} still has a CREATING index after 60 s")
            time.sleep(0.05)

    def delete_table(self, physical: str) -> None:
        try:
            self.raw(self.ddb, "DeleteTable", {"TableName": physical})
        except (ClientError, BotoCoreError):
            pass  # a table the case already deleted, or a server that is gone; nothing to clean

    def scan_all(self, physical: str) -> oc.Outcome:
        """Every item of a table, following LastEvaluatedKey, with strongly consistent reads."""
        items: list[dict] = []
        params: dict[str, Any] = {"TableName": physical, "ConsistentRead": True}
        try:
            while True:
                page = self.raw(self.ddb, "Scan", params)
                items.extend(page.get("Items", []))
                if not page.get("LastEvaluatedKey"):
                    break
                params["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        except ClientError as err:
            return oc.failure(err.response)
        except (BotoCoreError, ValueError, KeyError, TypeError) as err:
            return oc.client_failure(err)
        return oc.final_scan(items)

    # Streams ---------------------------------------------------------------------------------

    def read_stream(self, physical: str) -> oc.Outcome:
        """All records of the table's latest stream, from TRIM_HORIZON of every shard."""
        try:
            table = self.raw(self.ddb, "DescribeTable", {"TableName": physical})["Table"]
            arn = table.get("LatestStreamArn")
            if not arn:
                return oc.Outcome({"ok": {"stream": None, "records": []}})
            shards, view = self._shards(arn)
            records: list[dict] = []
            for shard in shards:
                records.extend(self._shard_records(arn, shard["ShardId"]))
        except ClientError as err:
            return oc.failure(err.response)
        except (BotoCoreError, ValueError, KeyError, TypeError) as err:
            return oc.client_failure(err)
        return oc.stream_records(view, records)

    def _shards(self, arn: str) -> tuple[list[dict], dict]:
        shards: list[dict] = []
        params: dict[str, Any] = {"StreamArn": arn}
        while True:
            description = self.raw(self.streams, "DescribeStream", params)["StreamDescription"]
            shards.extend(description.get("Shards", []))
            last = description.get("LastEvaluatedShardId")
            if not last:
                break
            params["ExclusiveStartShardId"] = last
        view = {"StreamViewType": description.get("StreamViewType"), "KeySchema": description.get("KeySchema")}
        # Parents before children: shards sorted by the first sequence number they hold.
        shards.sort(key=lambda s: int(s.get("SequenceNumberRange", {}).get("StartingSequenceNumber", "0") or 0))
        return shards, view

    def _shard_records(self, arn: str, shard_id: str) -> list[dict]:
        iterator = self.raw(
            self.streams,
            "GetShardIterator",
            {"StreamArn": arn, "ShardId": shard_id, "ShardIteratorType": "TRIM_HORIZON"},
        ).get("ShardIterator")
        records: list[dict] = []
        # An open shard hands out a next iterator forever; an empty page means we are caught up.
        for _ in range(10_000):
            if not iterator:
                break
            page = self.raw(self.streams, "GetRecords", {"ShardIterator": iterator})
            records.extend(page.get("Records", []))
            if not page.get("Records"):
                break
            iterator = page.get("NextShardIterator")
        return records
