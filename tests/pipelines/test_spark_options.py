"""The connector's option checks and offset arithmetic, without Spark or a broker."""

from __future__ import annotations

import json

import pytest

from semel.pipelines.spark.options import (
    EARLIEST,
    LATEST,
    OptionError,
    sink_options,
    source_options,
    stream_prefix,
)
from semel.pipelines.spark.source import KafkaRange, Planner, _rate_limit

BOOT = {"kafka.bootstrap.servers": "h:1"}


def test_names_are_case_insensitive_and_kafka_options_reach_the_client():
    o = source_options({**BOOT, "SUBSCRIBE": "a, b", "StartingOffsets": "earliest",
                        "kafka.security.protocol": "SSL", "includeHeaders": "TRUE"},
                       streaming=True)
    assert o.subscription.topics == ("a", "b")
    assert o.starting.default == EARLIEST
    assert o.client == {"bootstrap.servers": "h:1", "security.protocol": "SSL"}
    assert o.include_headers and o.fail_on_data_loss
    assert o.isolation_level == "read_committed"


def test_defaults_as_spark():
    assert source_options({**BOOT, "subscribe": "a"}, streaming=True).starting.default == LATEST
    batch = source_options({**BOOT, "subscribe": "a"}, streaming=False)
    assert (batch.starting.default, batch.ending.default) == (EARLIEST, LATEST)


def test_per_partition_offsets_and_assign():
    o = source_options({**BOOT, "assign": json.dumps({"t": [0, 1]}),
                        "startingOffsets": json.dumps({"t": {"0": 5, "1": -2}})},
                       streaming=False)
    assert o.subscription.assigned == (("t", 0), ("t", 1))
    assert (o.starting.for_partition("t", 0), o.starting.for_partition("t", 1)) == (5, EARLIEST)
    with pytest.raises(OptionError, match="not in 'assign'"):
        source_options({**BOOT, "assign": json.dumps({"t": [0]}),
                        "startingOffsets": json.dumps({"t": {"3": 1}})}, streaming=False)
    with pytest.raises(OptionError, match="list of partition numbers"):
        source_options({**BOOT, "assign": json.dumps({"t": 0})}, streaming=False)


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "positive integer"),
    ({"subscribePattern": "(", }, "not a regular expression"),
    ({"subscribe": " , "}, "names no topic"),
    ({"subscribe": "a", "kafka.isolation.level": "dirty"}, "read_committed or"),
    ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "checkpoint"),
])
def test_source_option_errors(options, message):
    with pytest.raises(OptionError, match=message):
        source_options({**BOOT, **options}, streaming=True)


def test_sink_options():
    o = sink_options({**BOOT, "topic": "out", "checkpointLocation": "/ck",
                      "queryName": "q", "subscribe": "ignored-as-spark-does"})
    assert (o.topic, o.checkpoint_location, o.transactional_id_prefix) == ("out", "/ck", None)
    with pytest.raises(OptionError, match="must be specified"):
        sink_options({"topic": "out"})
    with pytest.raises(OptionError, match="transactionalIdPrefix"):
        sink_options({**BOOT, "transactionalIdPrefix": "has space"})
    with pytest.raises(OptionError, match="idempotent"):
        sink_options({**BOOT, "kafka.enable.idempotence": "false"})


def test_stream_prefix_names_the_query():
    a = stream_prefix("/ck", "id-1")
    assert a == stream_prefix("/ck", "id-1") and a.startswith("semel-spark-")
    assert len({a, stream_prefix("/ck", "id-2"), stream_prefix("/ck2", "id-1")}) == 3


def test_rate_limit_spreads_by_backlog():
    begin = {("t", 0): 0, ("t", 1): 100}
    end = {("t", 0): 900, ("t", 1): 200}
    assert _rate_limit(begin, end, 2000) == end
    limited = _rate_limit(begin, end, 100)
    assert limited == {("t", 0): 90, ("t", 1): 110}
    # a tiny share still moves a partition forward
    assert _rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}, 10) == {
        ("t", 0): 9, ("t", 1): 1}


def test_split():
    planner = Planner(source_options({**BOOT, "subscribe": "t", "maxRecordsPerPartition": "4"},
                                     streaming=False))
    parts = planner.split([KafkaRange("t", 0, 0, 10), KafkaRange("t", 1, 5, 5)])
    assert [(p.start, p.end) for p in parts] == [(0, 4), (4, 8), (8, 10)]
    planner = Planner(source_options({**BOOT, "subscribe": "t", "minPartitions": "4"},
                                     streaming=False))
    parts = planner.split([KafkaRange("t", 0, 0, 6), KafkaRange("t", 1, 0, 2)])
    assert [(p.partition, p.start, p.end) for p in parts] == [
        (0, 0, 1), (0, 1, 3), (0, 3, 6), (1, 0, 2)]
    # exactly minPartitions tasks where there are that many offsets
    parts = planner.split([KafkaRange("t", 0, 0, 5)])
    assert [(p.start, p.end) for p in parts] == [(0, 1), (1, 2), (2, 3), (3, 5)]
