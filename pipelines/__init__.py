"""semel's data pipelines: the PySpark Kafka source and exactly-once sink (``pipelines.spark``),
the example exactly-once pipeline (``pipelines.example``, ``make pipeline``) and the reader of a
stopped broker's data directory. Everything here talks to Kafka over the wire through
confluent-kafka, so it works against any Kafka-compatible broker; semel is the default.
"""
