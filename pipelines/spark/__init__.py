"""A PySpark Kafka source and exactly-once sink on PySpark's Python Data Source API.

    from semel.pipelines.spark import register
    register(spark)                          # once per SparkSession
    df = (spark.readStream.format("semel")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders").load())
    (df.writeStream.format("semel").option("kafka.bootstrap.servers", "127.0.0.1:9092")
       .option("topic", "out").option("checkpointLocation", "/tmp/ck").start())

Options and columns are Spark's own Kafka connector's (``format("kafka")``, a JVM jar PySpark
does not ship); the differences: reads are read_committed by default, and the sink writes
exactly once. docs/SPARK.md has the whole story. The name "kafka" itself is taken by Spark.
"""

from __future__ import annotations

import logging

from semel.pipelines.spark.datasource import KafkaDataSource

__all__ = ["KafkaDataSource", "register"]


def register(spark) -> None:
    """Make ``format("semel")`` (Kafka) and ``format("semel-log")`` (a data directory)
    known to ``spark``. The second reads segments with semel's own storage code, so it is
    there only where semel is installed, not where just ``pipelines`` is shipped to a
    cluster (``--py-files``)."""
    spark.dataSource.register(KafkaDataSource)
    try:
        from semel.pipelines.spark.datadir import DataDirDataSource
    except ImportError as e:
        logging.getLogger("semel.spark").info("format('semel-log') not registered: %s", e)
        return
    spark.dataSource.register(DataDirDataSource)
