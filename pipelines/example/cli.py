"""``python -m semel.pipelines.example``: run the example job against a Kafka cluster, or (``--demo``)
run it end to end against a fresh semel and check its output (``make pipeline``).

    python -m semel.pipelines.example --bootstrap-servers HOST:PORT --checkpoint DIR
        [--input orders] [--output orders-enriched] [--totals-output orders-by-region]
        [--no-totals] [--trigger available-now | --trigger processing-time SEC]
        [--starting-offsets earliest|latest] [--max-offsets-per-trigger N]
        [--customers PATH] [--kafka-option KEY=VALUE ...] [--master URL]
    python -m semel.pipelines.example --demo [--orders N] [--bootstrap-servers HOST:PORT]

Under ``spark-submit`` (which can run ``pipelines/example/job.py``) the master is
spark-submit's; ``--master`` is for running the module directly (default: local).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

TRIGGERS = ("available-now", "processing-time")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m semel.pipelines.example",
        description="Orders enriched from a customers table and per-region totals per minute, "
                    "read from and written to Kafka exactly once (semel's Spark connector).")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]",
                   help="the Kafka cluster (required unless --demo, which starts semel)")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="where Spark keeps the queries' checkpoints: a directory every node "
                        "can reach on a cluster (HDFS, S3...); required unless --demo")
    p.add_argument("--input", default="orders", help="input topic (default: %(default)s)")
    p.add_argument("--output", default="orders-enriched",
                   help="enriched orders topic (default: %(default)s)")
    p.add_argument("--totals-output", default="orders-by-region",
                   help="per-region totals topic (default: %(default)s)")
    p.add_argument("--no-totals", action="store_true", help="only the enriched orders")
    p.add_argument("--trigger", nargs="+", default=["available-now"], metavar="WORD",
                   help="available-now: process what is there, then stop (default); "
                        "processing-time SEC: a micro-batch every SEC seconds, until stopped")
    p.add_argument("--starting-offsets", choices=("earliest", "latest"), default="earliest",
                   help="where a query without a checkpoint starts (default: %(default)s)")
    p.add_argument("--max-offsets-per-trigger", type=int, metavar="N",
                   help="at most N input records per micro-batch")
    p.add_argument("--customers", metavar="PATH",
                   help="the customers table as JSON lines (customer_id, name, region, tier, "
                        "discount_pct); default: the built-in table")
    p.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a client setting for the source and the sink, e.g. "
                        "security.protocol=SASL_SSL (repeatable)")
    p.add_argument("--master", metavar="URL",
                   help="Spark master when not run by spark-submit (default: local[*], "
                        "local[2] with --demo)")
    p.add_argument("--demo", action="store_true",
                   help="produce orders (some in aborted transactions), run the job twice "
                        "from one checkpoint on local Spark, check the output exactly and "
                        "print one summary line; starts semel unless --bootstrap-servers")
    p.add_argument("--orders", type=int, default=4000, metavar="N",
                   help="--demo: how many orders to produce (default: %(default)s)")
    return p


# the demo's driver log: errors only, and not PySpark's "Setting default log level" banner
QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def spark_session(master: str | None, app_name: str, scratch: Path | None = None):
    """A SparkSession with ``format("semel")`` registered. On a local master the Python workers
    run this interpreter and shuffles use as many partitions as there are cores (Spark's 200
    would mean 200 state-store tasks per micro-batch of the per-region totals). ``scratch``:
    a quiet local session for the demo, its files under that directory."""
    if master is None or master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from semel.pipelines.spark import KafkaDataSource

    builder = (SparkSession.builder.appName(app_name)
               .config("spark.ui.showConsoleProgress", "false"))
    if master is not None:
        builder = builder.master(master)
    if scratch is not None:
        scratch.mkdir(parents=True, exist_ok=True)
        log_config = scratch / "log4j2.properties"
        log_config.write_text(QUIET_LOG4J2)
        builder = (builder
                   .config("spark.driver.extraJavaOptions",
                           f"-Dlog4j2.configurationFile={log_config.as_uri()}")
                   .config("spark.local.dir", str(scratch / "local"))
                   .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
                   .config("spark.ui.enabled", "false")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.host", "127.0.0.1"))
    spark = builder.getOrCreate()
    context = spark.sparkContext
    if scratch is not None:
        context.setLogLevel("ERROR")
    if context.master.startswith("local") and not context.getConf().contains(
            "spark.sql.shuffle.partitions"):
        spark.conf.set("spark.sql.shuffle.partitions", str(context.defaultParallelism))
    _share_python_path(context)
    # format("semel") alone: pipelines.spark.register() also brings format("semel-log"),
    # whose reader needs semel's storage code, more than --py-files pipelines.zip ships
    spark.dataSource.register(KafkaDataSource)
    return spark


def _share_python_path(context) -> None:
    """Spark (4.3) starts the Python processes that plan a Python data source's reads, on the
    driver, without spark-submit's ``--py-files``: add where this driver imported
    ``semel.pipelines`` from (that zip, whose top folder is ``semel``) to the PYTHONPATH
    Spark gives its Python workers. Executors get ``--py-files`` as usual; a path they lack
    is ignored. An installed semel (or a source tree's editable install) needs nothing."""
    from semel import pipelines

    package_dir = Path(pipelines.__file__).parents[1]
    if package_dir.name != "semel":  # installed from a source tree: workers import it too
        return
    root = str(package_dir.parent)
    paths = [p for p in context.environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        context.environment["PYTHONPATH"] = os.pathsep.join([*paths, root])


def _trigger(p: argparse.ArgumentParser, words: list[str]) -> float | None:
    if words == ["available-now"]:
        return None
    if len(words) == 2 and words[0] == "processing-time":
        try:
            seconds = float(words[1])
        except ValueError:
            seconds = 0.0
        if seconds > 0:
            return seconds
    p.error(f"--trigger: expected available-now or processing-time SEC, not {' '.join(words)}")


def _kafka_options(p: argparse.ArgumentParser, pairs: list[str]) -> dict[str, str]:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            p.error(f"--kafka-option: expected KEY=VALUE, not {pair!r}")
        options[key.removeprefix("kafka.")] = value
    return options


def _job(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    from semel.pipelines.example import job

    if not args.bootstrap_servers or not args.checkpoint:
        p.error("--bootstrap-servers and --checkpoint are required (or --demo)")
    config = job.JobConfig(
        bootstrap_servers=args.bootstrap_servers, checkpoint=args.checkpoint,
        input_topic=args.input, output_topic=args.output,
        totals_topic=None if args.no_totals else args.totals_output,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        processing_time_s=_trigger(p, args.trigger),
        kafka=_kafka_options(p, args.kafka_option))
    spark = spark_session(args.master, "semel-example-orders")
    try:
        job.run(spark, config, job.customers_frame(spark, args.customers))
    except KeyboardInterrupt:
        return 130
    finally:
        spark.stop()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from semel.pipelines.example.demo import Semel, run_demo

    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        print("pipeline: Spark needs Java 17 or later (java on PATH, or JAVA_HOME), e.g. "
              "apt-get install openjdk-17-jre-headless", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="semel-pipeline-"))
    try:
        with contextlib.ExitStack() as stack:  # stopped in reverse: Spark, then semel
            if args.bootstrap_servers:
                bootstrap, suffix = args.bootstrap_servers, f"-{uuid.uuid4().hex[:8]}"
            else:
                bootstrap, suffix = stack.enter_context(Semel(workdir / "semel")).bootstrap, ""
            spark = spark_session(args.master or "local[2]", "semel-example-demo",
                                  scratch=workdir / "spark")
            stack.callback(spark.stop)
            result = run_demo(spark, bootstrap, workdir, orders=args.orders, suffix=suffix,
                              max_offsets_per_trigger=args.max_offsets_per_trigger or 1000)
        print(result.summary(), flush=True)
        return 0 if result.report.ok else 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    return _demo(args) if args.demo else _job(args, p)
