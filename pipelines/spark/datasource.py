"""``format("semel")``: the Kafka data source Spark instantiates, per call, with the options.

Spark creates this object in a Python worker for each thing it needs (the schema, a batch
reader, a stream reader, a writer) and pickles readers and writers to the executors, so
everything here is built from the options alone.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from semel.pipelines.spark.options import SourceOptions, sink_options, source_options
from semel.pipelines.spark.schema import source_schema
from semel.pipelines.spark.sink import KafkaBatchWriter, KafkaStreamWriter, check_input_schema
from semel.pipelines.spark.source import KafkaRange, StreamPlanner, plan_batch, read_range

NAME = "semel"


class KafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        # asked when a reading DataFrame is defined: the source's options are checked here,
        # before any query starts (a sink's options are checked when its writer is made)
        options = source_options(self.options, streaming=None)
        return source_schema(options.include_headers)

    def reader(self, schema) -> DataSourceReader:
        return KafkaBatchReader(source_options(self.options, streaming=False))

    def streamReader(self, schema) -> DataSourceStreamReader:
        return KafkaStreamReader(source_options(self.options, streaming=True))

    def writer(self, schema, overwrite: bool):
        options = sink_options(self.options)
        if overwrite:
            raise ValueError("save mode Overwrite is not allowed for Kafka: use append")
        check_input_schema(schema, options.topic)
        return KafkaBatchWriter(options)

    def streamWriter(self, schema, overwrite: bool):
        options = sink_options(self.options)
        check_input_schema(schema, options.topic)
        return KafkaStreamWriter(options)


class KafkaBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self):
        return plan_batch(self.options)

    def read(self, partition: KafkaRange):
        return read_range(self.options, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets in Spark's checkpoint as {"topic": {"partition": offset}}; micro-batches end
    at the LSO (read_committed), limited by maxOffsetsPerTrigger."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.planner = StreamPlanner(options)

    def __getstate__(self):
        # executors need only the options (read is static); the planner's client stays here
        return {"options": self.options, "planner": None}

    def initialOffset(self) -> dict:
        return self.planner.initial()

    def getDefaultReadLimit(self):
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self.planner.latest(start, max_rows)

    def reportLatestOffset(self) -> dict | None:
        """The latest offsets (LSOs at read_committed) as of the last planning, for the
        query's progress ("latestOffset")."""
        return self.planner.last_latest

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    def partitions(self, start: dict, end: dict):
        return self.planner.ranges(start, end)

    def read(self, partition: KafkaRange):
        return read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        """Offsets live in Spark's checkpoint; nothing is committed to Kafka."""

    def stop(self) -> None:
        if self.planner is not None:
            self.planner.close()
