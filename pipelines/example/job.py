"""The example job: orders enriched from a customers table, and per-region totals per minute.

    orders            JSON orders keyed by customer id (pipelines.example.orders)
      -> parse, left join the customers table (broadcast: a stream-static join)
      -> orders-enriched    one record per order, keyed by customer id: the order with the
                            customer's name, region and tier, the tier's discount and the net
                            amount after it (integer cents, rounded down)
      -> orders-by-region   per region and 1-minute event-time window: the number of orders
                            and their net amount, written once, when the watermark (the latest
                            event time less 2 minutes) passes the window's end; keyed by region

Two streaming queries, checkpoints ``<checkpoint>/enriched`` and ``<checkpoint>/by-region``,
read and write through ``format("semel")``: read_committed in, exactly once out. Per-key
order holds because a customer's orders are in one input partition, which one task reads per
micro-batch, and a broadcast join keeps the stream's order. Values that are not JSON orders
are dropped. ``spark-submit`` can run this file: it calls ``pipelines.example.cli.main``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from semel.pipelines.example.orders import CUSTOMERS, UNKNOWN_REGION, WATERMARK_DELAY_MS, WINDOW_MS

ORDER_SCHEMA = ("order_id STRING, customer_id STRING, seq BIGINT, amount_cents BIGINT, "
                "event_time STRING")
CUSTOMER_SCHEMA = "customer_id STRING, name STRING, region STRING, tier STRING, discount_pct INT"
WINDOW = f"{WINDOW_MS // 1000} seconds"
WATERMARK_DELAY = f"{WATERMARK_DELAY_MS // 1000} seconds"
# timestamps in output values: ISO-8601 in UTC whatever the session's time zone; nulls kept
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSXXX", "timeZone": "UTC",
                "ignoreNullFields": "false"}


@dataclass(frozen=True)
class JobConfig:
    bootstrap_servers: str
    checkpoint: str  # a directory Spark keeps both queries' checkpoints under
    input_topic: str = "orders"
    output_topic: str = "orders-enriched"
    totals_topic: str | None = "orders-by-region"  # None: no per-region totals
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    processing_time_s: float | None = None  # None: Trigger.AvailableNow (all there is, stop)
    kafka: dict[str, str] = field(default_factory=dict)  # more client settings (security...)

    def client_options(self) -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.bootstrap_servers,
                **{f"kafka.{k}": v for k, v in self.kafka.items()}}

    def checkpoint_of(self, query: str) -> str:
        return f"{self.checkpoint.rstrip('/')}/{query}"


def customers_frame(spark: SparkSession, path: str | None = None) -> DataFrame:
    """The reference table: JSON lines at ``path`` (columns of CUSTOMER_SCHEMA), or the
    built-in table the demo uses."""
    if path is not None:
        return spark.read.schema(CUSTOMER_SCHEMA).json(path)
    rows = [(c.customer_id, c.name, c.region, c.tier, c.discount_pct) for c in CUSTOMERS]
    return spark.createDataFrame(rows, CUSTOMER_SCHEMA)


def read_orders(spark: SparkSession, config: JobConfig) -> DataFrame:
    reader = spark.readStream.format("semel").options(**config.client_options())
    reader = reader.option("subscribe", config.input_topic)
    reader = reader.option("startingOffsets", config.starting_offsets)
    if config.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    return reader.load()


def parse_orders(records: DataFrame) -> DataFrame:
    """Kafka rows -> order columns and ``event_ts``, the event time as a timestamp."""
    order = F.from_json(F.col("value").cast("string"), ORDER_SCHEMA)
    return (records.select(order.alias("o")).select("o.*")
            .where(F.col("order_id").isNotNull())
            .withColumn("event_ts", F.to_timestamp("event_time")))


def enrich(orders: DataFrame, customers: DataFrame) -> DataFrame:
    """Each order with its customer's name, region, tier and discount, and the net amount."""
    joined = orders.join(F.broadcast(customers), "customer_id", "left")
    return (joined
            .withColumn("discount_pct", F.coalesce("discount_pct", F.lit(0)))
            .select("order_id", "customer_id", "seq", "event_time", "event_ts", "amount_cents",
                    "discount_pct",
                    F.expr("amount_cents * (100 - discount_pct) div 100").alias("net_cents"),
                    F.col("name").alias("customer_name"),
                    F.coalesce("region", F.lit(UNKNOWN_REGION)).alias("region"),
                    "tier"))


def enriched_records(enriched: DataFrame) -> DataFrame:
    value = F.to_json(F.struct(
        "order_id", "customer_id", "seq", "event_time", "amount_cents", "discount_pct",
        "net_cents", "customer_name", "region", "tier"), JSON_OPTIONS)
    return enriched.select(F.col("customer_id").alias("key"), value.alias("value"))


def region_totals(enriched: DataFrame) -> DataFrame:
    return (enriched.withWatermark("event_ts", WATERMARK_DELAY)
            .groupBy(F.window("event_ts", WINDOW), "region")
            .agg(F.count("*").alias("orders"), F.sum("net_cents").alias("net_cents")))


def totals_records(totals: DataFrame) -> DataFrame:
    value = F.to_json(F.struct(
        "region", F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"), "orders", "net_cents"), JSON_OPTIONS)
    return totals.select(F.col("region").alias("key"), value.alias("value"))


def _write(records: DataFrame, config: JobConfig, topic: str, query: str) -> StreamingQuery:
    writer = (records.writeStream.format("semel")
              .options(**config.client_options())
              .option("topic", topic)
              .option("checkpointLocation", config.checkpoint_of(query))
              .outputMode("append"))
    if config.processing_time_s is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.processing_time_s} seconds")
    return writer.start()


def start(spark: SparkSession, config: JobConfig,
          customers: DataFrame | None = None) -> dict[str, StreamingQuery]:
    """Start the job's queries: ``enriched`` and, unless ``totals_topic`` is None,
    ``by-region`` (the names of their checkpoint directories)."""
    customers = customers if customers is not None else customers_frame(spark)
    enriched = enrich(parse_orders(read_orders(spark, config)), customers)
    queries = {"enriched": _write(enriched_records(enriched), config, config.output_topic,
                                  "enriched")}
    if config.totals_topic is not None:
        queries["by-region"] = _write(totals_records(region_totals(enriched)), config,
                                      config.totals_topic, "by-region")
    return queries


def wait(queries: list[StreamingQuery], poll_s: float = 0.5) -> None:
    """Until every query has ended (Trigger.AvailableNow: everything there was is written);
    raises the first failure, and stops the others on the way out."""
    pending = list(queries)
    try:
        while pending:
            for query in list(pending):
                if query.awaitTermination(poll_s):  # raises the query's failure
                    pending.remove(query)
    finally:
        for query in queries:
            if query.isActive:
                query.stop()


def run(spark: SparkSession, config: JobConfig,
        customers: DataFrame | None = None) -> dict[str, StreamingQuery]:
    """Start the job and wait for it; the ended queries (their ``recentProgress``)."""
    queries = start(spark, config, customers)
    wait(list(queries.values()))
    return queries


if __name__ == "__main__":  # spark-submit pipelines/example/job.py ...
    from semel.pipelines.example.cli import main

    raise SystemExit(main())
