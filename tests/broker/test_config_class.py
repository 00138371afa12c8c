"""storage.config.config_class: the configuration classes (BrokerConfig, LogConfig, GroupConfig,
the listeners' SslSettings and ListenerSecurity) get ``__init__``, ``__eq__``, ``__hash__``,
``__repr__``, the frozen ``__setattr__``/``__delattr__`` and the pickling state as functions
that are not compiled from generated source at import (issue 18: that source was about a tenth
of a start's instructions, the frozen methods another 3%), and that behave as
``@dataclass(frozen=True, slots=True)``'s for keyword construction."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from semel.broker.config import BrokerConfig, load_config
from semel.broker.group_configs import GROUP_CONFIG_DEFS, GroupConfigDef
from semel.broker.security.listeners import ListenerSecurity, SslSettings
from semel.coordinator.group.config import GroupConfig
from semel.coordinator.transaction.config import TxnConfig
from semel.storage.cleaner.selection import CleanableRange, LogToClean
from semel.storage.config import LogConfig, config_class
from semel.storage.topic_partition import TopicPartition


def _made(number: int = 0) -> list[int]:
    return [number]


def _shape(name: str) -> type:
    """A fresh class body: a required field, defaults, a factory, the compare/hash/repr flags
    and a field outside __init__."""
    return type(name, (), {
        "__module__": __name__,
        "__annotations__": {"name": "str", "size": "int", "weight": "float", "tags": "list[int]",
                            "note": "str", "secret": "str", "cached": "int",
                            "derived": "tuple[int, ...]"},
        "size": 3,
        "weight": 1.5,
        "tags": field(default_factory=_made),
        "note": field(default="", compare=False),
        "secret": field(default="s", repr=False),
        "cached": field(default=0, hash=False),
        "derived": field(default=(), init=False),
    })


Generated = dataclass(frozen=True, slots=True)(_shape("Generated"))
Ours = config_class(_shape("Ours"))


@pytest.mark.parametrize("cls", [BrokerConfig, LogConfig, GroupConfig, TxnConfig, SslSettings,
                                 ListenerSecurity, GroupConfigDef, CleanableRange, LogToClean])
def test_the_config_classes_methods_are_not_compiled_from_generated_source(cls):
    for name in ("__init__", "__eq__", "__hash__", "__repr__", "__setattr__", "__delattr__",
                 "__getstate__", "__setstate__"):
        method = vars(cls)[name]
        code = getattr(method, "__wrapped__", method).__code__
        assert code.co_filename != "<string>", (cls, name)
    assert dataclasses.is_dataclass(cls)
    # frozen by its own __setattr__/__delattr__ (tested below), not by the dataclass machinery
    assert not cls.__dataclass_params__.frozen
    assert "__slots__" in vars(cls)


KWARGS = [
    {"name": "a"},
    {"name": "a", "size": 4},
    {"name": "a", "note": "other"},
    {"name": "a", "cached": 9},
    {"name": "a", "tags": [1, 2]},
    {"name": "a", "secret": "t", "weight": float("nan")},
    {"name": "b"},
]


@pytest.mark.parametrize("left", KWARGS)
@pytest.mark.parametrize("right", KWARGS)
def test_equality_and_hash_as_a_dataclass(left, right):
    generated = Generated(**left) == Generated(**right)
    assert (Ours(**left) == Ours(**right)) is generated
    assert (Ours(**left) != Ours(**right)) is not generated
    nan = float("nan")  # the same object on both sides: equal, as in a tuple comparison
    assert Ours(name="n", weight=nan) == Ours(name="n", weight=nan)
    if "tags" not in left:  # tags is a list: neither is hashable then
        assert hash(Ours(**left, tags=())) == hash(Generated(**left, tags=()))


def test_construction_and_repr_as_a_dataclass():
    ours, generated = Ours(name="x", size=5), Generated(name="x", size=5)
    assert repr(ours) == repr(generated).replace("Generated(", "Ours(", 1)
    assert "secret" not in repr(ours)
    assert (ours.tags, ours.derived, ours.note) == ([0], (), "")
    assert Ours(name="x").tags is not Ours(name="x").tags  # a fresh value per instance
    assert Ours(name="x") != generated and ours.__eq__(generated) is NotImplemented
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        Ours(name="x", colour=1)
    with pytest.raises(TypeError, match="missing required keyword-only argument: 'name'"):
        Ours()
    with pytest.raises(TypeError):
        Ours(name="x", derived=(1,))  # init=False, as a dataclass refuses it
    with pytest.raises(dataclasses.FrozenInstanceError):
        ours.size = 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        del ours.size
    changed = dataclasses.replace(ours, size=7)
    assert (changed.size, changed.name, changed.tags) == (7, "x", [0])
    assert pickle.loads(pickle.dumps(ours)) == ours  # the cleaner's jobs are pickled
    assert [f.name for f in dataclasses.fields(Ours)] == [f.name for f in
                                                           dataclasses.fields(Generated)]


def test_the_broker_config_keeps_its_value_semantics(tmp_path):
    a = load_config(None, ["log.flush.mode=none"], {}, port=0, data_dir=str(tmp_path))
    b = load_config(None, ["log.flush.mode=none"], {}, port=0, data_dir=str(tmp_path))
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != dataclasses.replace(a, num_partitions=a.num_partitions + 1)
    assert a == dataclasses.replace(a, static_keys=(("x", "1"),))  # not compared
    assert repr(a).startswith("BrokerConfig(listeners=(")
    assert LogConfig.from_overrides(LogConfig(), {"segment.bytes": "700"}).segment_bytes == 700
    assert pickle.loads(pickle.dumps(LogConfig())) == LogConfig()


# the small classes built at import (the group configs' table, the cleaner's selection), each
# with two field sets that differ in every field
SMALL = [
    (GroupConfigDef,
     {"name": "a.ms", "broker_name": "group.a.ms", "default": 5, "at_least": 1, "doc": "A."},
     {"name": "b", "broker_name": "b", "default": "latest", "at_least": None, "doc": "B."}),
    (CleanableRange,
     {"first_dirty_offset": 0, "first_uncleanable_offset": 10, "reset_checkpoint": False},
     {"first_dirty_offset": 5, "first_uncleanable_offset": 20, "reset_checkpoint": True}),
    (LogToClean,
     {"topic_partition": TopicPartition("t", 0), "first_dirty_offset": 0,
      "first_uncleanable_offset": 10, "clean_bytes": 100, "cleanable_bytes": 50,
      "compaction_delay_ms": 0},
     {"topic_partition": TopicPartition("u", 1), "first_dirty_offset": 3,
      "first_uncleanable_offset": 30, "clean_bytes": 0, "cleanable_bytes": 7,
      "compaction_delay_ms": 9}),
]


@pytest.mark.parametrize(("cls", "one", "other"), SMALL, ids=[c.__name__ for c, _, _ in SMALL])
def test_the_small_classes_behave_as_their_dataclass(cls, one, other):
    reference = dataclass(frozen=True, slots=True)(type(cls.__name__, (), {
        "__module__": __name__,
        "__annotations__": {f.name: f.type for f in dataclasses.fields(cls)}}))
    assert [f.name for f in dataclasses.fields(cls)] == list(one)
    for left in (one, other):
        for name in left:  # a pair that differs in this field only
            right = {**left, name: other[name] if left is one else one[name]}
            assert cls(**left) != cls(**right) and reference(**left) != reference(**right)
        assert cls(**left) == cls(**dict(left)) and hash(cls(**left)) == hash(reference(**left))
        assert repr(cls(**left)) == repr(reference(**left))
        assert pickle.loads(pickle.dumps(cls(**left))) == cls(**left)
        assert dataclasses.astuple(cls(**left)) == dataclasses.astuple(reference(**left))
    assert dataclasses.replace(cls(**one), **other) == cls(**other)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cls(**one), next(iter(one)), 1)
    with pytest.raises(AttributeError):
        cls(**one).__dict__  # noqa: B018 - slots: no instance dictionary


def test_the_group_config_table_is_unchanged():
    assert [dataclasses.astuple(d) for d in GROUP_CONFIG_DEFS.values()][:3] == [
        ("consumer.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms", 5000, 1,
         "The heartbeat interval given to the members of this consumer group."),
        ("consumer.session.timeout.ms", "group.consumer.session.timeout.ms", 45000, 1,
         "The timeout to detect client failures when using the consumer group protocol."),
        ("share.auto.offset.reset", "share.auto.offset.reset", "latest", None,
         ("The strategy to initialize the share-partition start offset: earliest, latest or "
          "by_duration:<duration>.")),
    ]
    assert {d.name: (d.default, d.at_least) for d in GROUP_CONFIG_DEFS.values()} == {
        "consumer.heartbeat.interval.ms": (5000, 1), "consumer.session.timeout.ms": (45000, 1),
        "share.auto.offset.reset": ("latest", None),
        "share.isolation.level": ("read_uncommitted", None),
        "share.heartbeat.interval.ms": (5000, 1), "share.record.lock.duration.ms": (30000, 1000),
        "share.session.timeout.ms": (45000, 1)}
