"""The rows the source yields and the sink takes, as Spark's own Kafka connector defines them.

Spark's columns: ``key`` and ``value`` (binary), ``topic`` (string), ``partition`` (int),
``offset`` (long), ``timestamp`` (timestamp), ``timestampType`` (int: 0 create time,
1 log-append time), and ``headers`` (array of key/value structs) when ``includeHeaders`` is
true. Reads build Arrow record batches column by column (``RecordColumns``): Spark takes them
without converting row by row.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_TYPE = ArrayType(StructType([
    StructField("key", StringType()),
    StructField("value", BinaryType()),
]))


def source_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


_ARROW_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", _ARROW_HEADERS))
    return pa.schema(fields)


class RecordColumns:
    """Column lists of one topic-partition's records, turned into an Arrow batch by ``take``.

    ``add`` takes a record's fields; ``timestamp_ms`` is Kafka's milliseconds since the epoch
    and ``headers`` a list of (str, bytes | None) pairs or None.
    """

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[dict] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, key, value, offset: int, timestamp_ms: int, timestamp_type: int,
            headers=None) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.offsets.append(offset)
        self.timestamps.append(timestamp_ms)
        self.timestamp_types.append(timestamp_type)
        if self.include_headers:
            self.headers.append(
                [{"key": k, "value": v} for k, v in headers] if headers else [])

    def take(self) -> pa.RecordBatch:
        n = len(self.offsets)
        millis = pa.array(self.timestamps, pa.int64())
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC")),
            pa.array(self.timestamp_types, pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array(self.headers, _ARROW_HEADERS))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)
