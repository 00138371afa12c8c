"""The example exactly-once pipeline: a PySpark Structured Streaming job that enriches orders
from a customers table and totals them per region and minute, reading and writing Kafka
through ``pipelines.spark`` (``format("semel")``).

``job`` holds the Spark job, ``orders`` the data (the customers table, the demo's orders),
``check`` what the output must be, ``demo`` the end-to-end run ``make pipeline`` does, and
``cli`` the command line (``python -m semel.pipelines.example``, or ``spark-submit`` of
``pipelines/example/job.py``).
"""
