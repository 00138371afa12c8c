"""Fixtures of the Spark connector tests: one local SparkSession per test module (Spark takes
seconds to start), with semel's data sources registered."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    # executors' Python workers must run this interpreter (the venv with pyarrow, confluent-kafka)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from semel.pipelines.spark import register

    session = (
        SparkSession.builder.master("local[2,4]")  # 2 cores; a failed task is tried 4 times
        .appName("semel-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
