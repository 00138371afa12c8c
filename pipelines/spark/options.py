"""The connector's options, checked before a query starts, with Spark's Kafka option names.

Spark passes options case-insensitively (``self.options`` is a case-insensitive mapping; a
copy lowercases the keys), so everything here works on lowercased names. ``kafka.*`` options
go to the client with the prefix removed, as Spark does, except the few the connector must
own (offset resets, auto commit, serializers, the transactional id). A mistake raises
``OptionError`` naming the option and what is allowed: Spark shows it when the DataFrame is
defined or the query starts, never mid-stream.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

EARLIEST = -2
LATEST = -1

SOURCE_OPTIONS = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "endingoffsets",
    "maxoffsetspertrigger", "failondataloss", "includeheaders", "minpartitions",
    "maxrecordsperpartition", "kafkaconsumer.polltimeoutms", "groupidprefix",
}
# the last two Spark passes to a streaming sink itself (writeStream's checkpoint and name)
SINK_OPTIONS = {"topic", "transactionalidprefix", "checkpointlocation", "queryname",
                "twophasecommit"}
TWO_PHASE_COMMIT_MODES = ("auto", "true", "false")

# options of Spark's Kafka source this connector does not implement: named in the error so a
# user moving a job over knows at once what to change
SPARK_ONLY = {
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "minoffsetspertrigger",
    "maxtriggerdelay", "fetchoffset.numretries", "fetchoffset.retryintervalms",
}

# kafka.* options the connector sets itself (why, for the error message)
SOURCE_OWNED = {
    "auto.offset.reset": "set startingOffsets instead",
    "enable.auto.commit": "offsets are kept in Spark's checkpoint, never committed to a group",
    "key.deserializer": "keys are always read as bytes",
    "value.deserializer": "values are always read as bytes",
    "interceptor.classes": "not available to librdkafka",
}
SINK_OWNED = {
    "transactional.id": "each task's id is derived from transactionalIdPrefix",
    "enable.idempotence": "the sink's transactions need the idempotent producer",
    "key.serializer": "keys are written as bytes or UTF-8 strings",
    "value.serializer": "values are written as bytes or UTF-8 strings",
    "interceptor.classes": "not available to librdkafka",
}

DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's kafkaConsumer.pollTimeoutMs
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000


class OptionError(ValueError):
    """A connector option is missing, unknown or malformed."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _client_config(options: dict[str, str], owned: dict[str, str]) -> dict[str, str]:
    config = {}
    for name, value in options.items():
        if not name.startswith("kafka."):
            continue
        key = name[len("kafka."):]
        if key in owned:
            raise OptionError(f"option 'kafka.{key}' is not allowed: {owned[key]}")
        config[key] = value
    if not config.get("bootstrap.servers"):
        raise OptionError("option 'kafka.bootstrap.servers' must be specified")
    return config


def _check_names(options: dict[str, str], allowed: set[str], what: str) -> None:
    for name in options:
        if name.startswith("kafka.") or name in allowed:
            continue
        if name in SPARK_ONLY:
            raise OptionError(f"option '{name}' of Spark's Kafka source is not supported by "
                              f"this connector")
        known = ", ".join(sorted(allowed | {"kafka.*"}))
        raise OptionError(f"unknown {what} option '{name}' (known: {known})")


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"option '{name}' must be true or false, not {raw!r}")


def _positive_int(options: dict[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise OptionError(f"option '{name}' must be a positive integer, not {raw!r}")
    return value


@dataclass(frozen=True)
class Subscription:
    """What to read: topics by name, by pattern, or fixed topic-partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern {self.pattern!r}"
        if self.assigned:
            return f"assign {sorted(self.assigned)}"
        return f"subscribe {list(self.topics)}"


def _subscription(options: dict[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in options]
    if len(given) != 1:
        raise OptionError("exactly one of the options 'subscribe', 'subscribePattern' and "
                          f"'assign' must be specified (given: {given or 'none'})")
    name = given[0]
    raw = options[name].strip()
    if name == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
        return Subscription(topics=topics)
    if name == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as e:
            raise OptionError(f"option 'subscribePattern' is not a regular expression: {e}")
        return Subscription(pattern=raw)
    parsed = _json(name, raw, 'e.g. {"topicA":[0,1],"topicB":[0]}')
    assigned = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions):
            raise OptionError(f"option 'assign': topic {topic!r} needs a list of partition "
                              f"numbers, not {partitions!r}")
        assigned += [(topic, p) for p in partitions]
    if not assigned:
        raise OptionError("option 'assign' names no partition")
    return Subscription(assigned=tuple(sorted(set(assigned))))


def _json(name: str, raw: str, example: str) -> dict:
    try:
        parsed = json.loads(raw)
    except ValueError as e:
        raise OptionError(f"option '{name}' is not valid JSON ({e}); {example}") from None
    if not isinstance(parsed, dict):
        raise OptionError(f"option '{name}' must be a JSON object; {example}")
    return parsed


@dataclass(frozen=True)
class OffsetSpec:
    """``startingOffsets``/``endingOffsets``: earliest or latest everywhere, or per partition
    (``EARLIEST`` = -2 and ``LATEST`` = -1 allowed inside the JSON, as in Spark)."""

    default: int  # EARLIEST or LATEST, for partitions the JSON does not name
    specific: tuple[tuple[tuple[str, int], int], ...] = ()

    def for_partition(self, topic: str, partition: int) -> int:
        return dict(self.specific).get((topic, partition), self.default)

    @property
    def partitions(self) -> set[tuple[str, int]]:
        return {tp for tp, _ in self.specific}


def _offsets(options: dict[str, str], name: str, default: int, allow_earliest: bool,
             allow_latest: bool) -> OffsetSpec:
    raw = options.get(name)
    if raw is None:
        return OffsetSpec(default)
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        value = EARLIEST if word == "earliest" else LATEST
        if (value == EARLIEST and not allow_earliest) or (value == LATEST and not allow_latest):
            raise OptionError(f"option '{name}' cannot be {word!r} here")
        return OffsetSpec(value)
    parsed = _json(name, raw, 'e.g. {"topicA":{"0":23,"1":-2}} with -2 earliest, -1 latest')
    specific = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"option '{name}': topic {topic!r} needs an object of "
                              f"partition -> offset, not {partitions!r}")
        for partition, offset in partitions.items():
            try:
                p = int(partition)
            except ValueError:
                raise OptionError(f"option '{name}': {partition!r} of topic {topic!r} is "
                                  f"not a partition number") from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST \
                    or p < 0:
                raise OptionError(f"option '{name}': offset {offset!r} of {topic}-{partition} "
                                  f"must be an offset, -2 (earliest) or -1 (latest)")
            if (offset == EARLIEST and not allow_earliest) or (
                    offset == LATEST and not allow_latest):
                raise OptionError(f"option '{name}': {offset} is not allowed for "
                                  f"{topic}-{partition} here")
            specific.append(((topic, p), offset))
    return OffsetSpec(default, tuple(specific))


@dataclass(frozen=True)
class SourceOptions:
    client: dict[str, str]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # batch reads only
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None
    max_records_per_partition: int
    poll_timeout_ms: int
    group_id_prefix: str = "semel-spark-source"
    isolation_level: str = "read_committed"


def source_options(raw: Mapping[str, str], streaming: bool | None) -> SourceOptions:
    """Check the source's options; ``streaming`` None checks what both kinds share."""
    options = _lower(raw)
    _check_names(options, SOURCE_OPTIONS, "source")
    client = _client_config(options, SOURCE_OWNED)
    isolation = client.pop("isolation.level", "read_committed")
    if isolation not in ("read_committed", "read_uncommitted"):
        raise OptionError("option 'kafka.isolation.level' must be read_committed or "
                          f"read_uncommitted, not {isolation!r}")
    subscription = _subscription(options)
    # Spark: batch reads start at earliest and may not start at latest; streams start at latest
    starting = _offsets(options, "startingoffsets", LATEST if streaming else EARLIEST,
                        allow_earliest=True, allow_latest=streaming is not False)
    ending = None
    if "endingoffsets" in options:
        if streaming:
            raise OptionError("option 'endingOffsets' is for batch queries only (a stream "
                              "has no end; use Trigger.AvailableNow to stop at the latest)")
        ending = _offsets(options, "endingoffsets", LATEST, allow_earliest=False,
                          allow_latest=True)
    elif streaming is False:
        ending = OffsetSpec(LATEST)
    if subscription.assigned:
        for spec in (starting, ending):
            extra = spec.partitions - set(subscription.assigned) if spec else set()
            if extra:
                raise OptionError(f"offsets given for partitions not in 'assign': "
                                  f"{sorted(extra)}")
    poll = _positive_int(options, "kafkaconsumer.polltimeoutms") or DEFAULT_POLL_TIMEOUT_MS
    return SourceOptions(
        client=client,
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(options, "maxoffsetspertrigger"),
        fail_on_data_loss=_bool(options, "failondataloss", True),
        include_headers=_bool(options, "includeheaders", False),
        min_partitions=_positive_int(options, "minpartitions"),
        max_records_per_partition=(_positive_int(options, "maxrecordsperpartition")
                                   or DEFAULT_MAX_RECORDS_PER_PARTITION),
        poll_timeout_ms=poll,
        group_id_prefix=options.get("groupidprefix", "semel-spark-source"),
        isolation_level=isolation,
    )


@dataclass(frozen=True)
class SinkOptions:
    client: dict[str, str]
    topic: str | None
    transactional_id_prefix: str | None
    checkpoint_location: str | None
    # streaming writes: "auto" (KIP-939 two-phase commit where the broker offers it), "true"
    # (required), "false" (per-task transactions)
    two_phase_commit: str = "auto"


def sink_options(raw: Mapping[str, str]) -> SinkOptions:
    options = _lower(raw)
    # a sink also accepts the source's reading options, so one options map serves both (as
    # Spark ignores them); only names neither side knows are mistakes
    _check_names(options, SINK_OPTIONS | SOURCE_OPTIONS, "sink")
    client = _client_config(options, SINK_OWNED)
    prefix = options.get("transactionalidprefix")
    if prefix is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", prefix):
        raise OptionError("option 'transactionalIdPrefix' must be 1-200 letters, digits, "
                          f"'.', '_' or '-', not {prefix!r}")
    topic = options.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' is empty")
    two_phase = options.get("twophasecommit", "auto").strip().lower()
    if two_phase not in TWO_PHASE_COMMIT_MODES:
        raise OptionError("option 'twoPhaseCommit' must be auto, true or false, not "
                          f"{options['twophasecommit']!r}")
    return SinkOptions(client=client, topic=topic, transactional_id_prefix=prefix,
                       checkpoint_location=options.get("checkpointlocation"),
                       two_phase_commit=two_phase)


def stream_prefix(checkpoint_location: str, query_id: str | None) -> str:
    """The transactional id prefix of a streaming query's tasks when the user sets none: the
    checkpoint location names the query across restarts (Spark replays its batches from
    there), and the query id, when readable, tells a fresh query at the same path apart."""
    digest = hashlib.sha256(f"{checkpoint_location}\0{query_id or ''}".encode()).hexdigest()
    return f"semel-spark-{digest[:20]}"
