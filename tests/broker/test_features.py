"""Feature flags: ApiVersions' feature fields, UpdateFeatures' rules on the wire, levels that
survive a restart, the Java AdminClient's describeFeatures/updateFeatures, and
transaction.version switched under a live confluent-kafka transactional producer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from semel.broker.features import FEATURES_FILE, apply_updates
from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.update_features_request import FeatureUpdateKey
from tests.javaclient import run_program
from tests.kafka_wire import KafkaWire, message

API_VERSIONS, UPDATE_FEATURES = 18, 57
UPGRADE, SAFE, UNSAFE = 1, 2, 3
JAVA_SOURCE = Path(__file__).resolve().parents[1] / "java" / "SemelFeatures.java"


def api_versions(wire: KafkaWire, version: int = 4):
    return wire.request(API_VERSIONS, version, message(
        API_VERSIONS, "request", client_software_name="t", client_software_version="1"))


def update(wire: KafkaWire, *updates: tuple[str, int, int], version: int = 1,
           validate_only: bool = False):
    req = message(UPDATE_FEATURES, "request", validate_only=validate_only, feature_updates=[
        FeatureUpdateKey(feature=f, max_version_level=level, upgrade_type=kind)
        for f, level, kind in updates])
    return wire.request(UPDATE_FEATURES, version, req)


def finalized(response) -> dict[str, int]:
    return {f.name: f.max_version_level for f in response.finalized_features}


def test_api_versions_features_as_kafka_4(broker):
    with KafkaWire.connect(broker.bootstrap) as w:
        v4 = api_versions(w, 4)
        v3 = api_versions(w, 3)
    assert {(f.name, f.min_version, f.max_version) for f in v4.supported_features} == {
        ("metadata.version", 7, 25), ("transaction.version", 0, 2), ("group.version", 0, 1)}
    # below v4 a feature whose minimum is 0 is left out (KAFKA-17492)
    assert [f.name for f in v3.supported_features] == ["metadata.version"]
    assert finalized(v4) == finalized(v3) == {
        "metadata.version": 25, "transaction.version": 2, "group.version": 1}
    assert v4.finalized_features_epoch == 0
    assert v4.zk_migration_ready is False


def test_update_features_validation(broker):
    prefix = "The update failed for all features since the following feature had an error: "
    cases = [
        ((("transaction.version", 1, UPGRADE),),
         ("Invalid update version 1 for feature transaction.version. Can't downgrade the version "
         "of this feature without setting the upgrade type to either safe or unsafe downgrade.")),
        ((("group.version", 2, UPGRADE),),
         ("Invalid update version 2 for feature group.version. Local controller 0 only supports "
         "versions 0-1")),
        ((("transaction.version", 2, SAFE),), None),  # same level: nothing to refuse
        ((("transaction.version", 1, 0),),
         ("Invalid update version 1 for feature transaction.version. The controller does not "
         "support the given upgrade type.")),
        ((("transaction.version", -1, SAFE),),
         ("Invalid update version -1 for feature transaction.version. A feature version cannot "
         "be less than 0.")),
        ((("no.such.feature", 1, UPGRADE),),
         ("Invalid update version 1 for feature no.such.feature. Local controller 0 does not "
         "support this feature.")),
        ((("no.such.feature", 0, SAFE),),
         ("Invalid update version 0 for feature no.such.feature. Feature no.such.feature not "
         "found.")),
        ((("metadata.version", 26, UPGRADE),),
         ("Invalid update version 26 for feature metadata.version. Local controller 0 only "
         "supports versions 7-25")),
        ((("metadata.version", 22, SAFE),),  # 4.0-IV1 changed the metadata format
         ("Invalid metadata.version 22. Refusing to perform the requested downgrade because it "
         "might delete metadata information.")),
        ((("metadata.version", 22, UNSAFE),),
         ("Invalid metadata.version 22. Unsafe metadata downgrade is not supported in this "
         "version.")),
        # all or nothing: the valid first update is not applied either
        ((("transaction.version", 1, SAFE), ("group.version", 3, UPGRADE)),
         ("Invalid update version 3 for feature group.version. Local controller 0 only supports "
         "versions 0-1")),
    ]
    with KafkaWire.connect(broker.bootstrap) as w:
        for updates, reason in cases:
            for version in (1, 2):
                r = update(w, *updates, version=version)
                if reason is None:
                    assert (r.error_code, r.error_message) == (Error.NONE, None)
                    assert len(r.results) == (1 if version == 1 else 0)
                else:
                    assert (r.error_code, r.error_message) == (
                        Error.INVALID_UPDATE_VERSION, prefix + reason), updates
                    assert r.results == []
        after = api_versions(w)
    assert finalized(after)["transaction.version"] == 2
    assert after.finalized_features_epoch == 2  # the two accepted same-level updates


def test_update_features_apply_persist_and_epoch(tmp_path):
    data = tmp_path / "data"
    with BrokerThread(data) as b, KafkaWire.connect(b.bootstrap) as w:
        r = update(w, ("transaction.version", 1, SAFE), validate_only=True)
        assert r.error_code == Error.NONE
        assert finalized(api_versions(w))["transaction.version"] == 2  # validate only
        r = update(w, ("transaction.version", 1, SAFE), ("metadata.version", 24, SAFE),
                   version=0)  # v0 reads no upgrade type: an upgrade, as Kafka 4.0
        assert r.error_code == Error.INVALID_UPDATE_VERSION
        r = update(w, ("transaction.version", 1, SAFE), ("metadata.version", 24, SAFE))
        assert (r.error_code, [(x.feature, x.error_code, x.error_message) for x in r.results]) \
            == (Error.NONE, [("transaction.version", 0, "NONE"), ("metadata.version", 0, "NONE")])
        after = api_versions(w)
        assert finalized(after) == {"metadata.version": 24, "transaction.version": 1,
                                    "group.version": 1}
        assert after.finalized_features_epoch == 1
        assert b.broker.txn_coordinator.transaction_version == 1  # in force at once
        r = update(w, ("group.version", 0, UNSAFE), version=2)
        assert (r.error_code, r.results) == (Error.NONE, [])
        assert "group.version" not in finalized(api_versions(w))  # level 0 is not listed
    stored = json.loads((data / FEATURES_FILE).read_text())
    assert stored == {"version": 1, "epoch": 2, "finalized": {
        "metadata.version": 24, "transaction.version": 1}}
    with BrokerThread(data) as b, KafkaWire.connect(b.bootstrap) as w:
        after = api_versions(w)
        assert finalized(after) == {"metadata.version": 24, "transaction.version": 1}
        assert after.finalized_features_epoch == 2
        assert b.broker.txn_coordinator.transaction_version == 1


def test_damaged_features_file_stops_the_start(tmp_path):
    from semel.storage.fs import MetadataFileError

    data = tmp_path / "data"
    data.mkdir()
    (data / FEATURES_FILE).write_text('{"version": 1, "epoch": 1, "finalized": '
                                      '{"transaction.version": 7}}')
    with pytest.raises(MetadataFileError, match="unreadable feature levels"):
        BrokerThread(data).start()


def test_apply_updates_is_all_or_nothing():
    levels = {"metadata.version": 25, "transaction.version": 2, "group.version": 1}
    assert apply_updates(levels, [("transaction.version", 0, SAFE)], 0) == {
        "metadata.version": 25, "group.version": 1}
    assert apply_updates(levels, [("metadata.version", 24, SAFE)], 0)["metadata.version"] == 24
    with pytest.raises(KafkaError):
        apply_updates(levels, [("transaction.version", 1, SAFE), ("x", 1, UPGRADE)], 0)
    assert levels["transaction.version"] == 2


# --------------------------------------------------------------------------- Java client


def java_features(bootstrap: str, *args: str) -> dict:
    (result,) = run_program(JAVA_SOURCE, "SemelFeatures", bootstrap, *args)
    return result


def test_java_admin_describe_and_update_features(broker):
    bootstrap = broker.bootstrap
    before = java_features(bootstrap, "describe")
    assert before["finalized"] == {"group.version": [1, 1], "metadata.version": [25, 25],
                                   "transaction.version": [2, 2]}
    assert before["supported"]["transaction.version"] == [0, 2]
    assert before["supported"]["group.version"] == [0, 1]
    assert java_features(bootstrap, "update", "transaction.version", "1", "upgrade") == {
        "ok": False, "error": "InvalidUpdateVersionException",
        "message": "The update failed for all features since the following feature had an "
                   "error: Invalid update version 1 for feature transaction.version. Can't "
                   "downgrade the version of this feature without setting the upgrade type to "
                   "either safe or unsafe downgrade."}
    assert java_features(bootstrap, "update", "transaction.version", "1", "safe",
                         "validate") == {"ok": True}
    assert java_features(bootstrap, "describe")["epoch"] == before["epoch"]
    assert java_features(bootstrap, "update", "transaction.version", "1", "safe") == {"ok": True}
    after = java_features(bootstrap, "describe")
    assert after["finalized"]["transaction.version"] == [1, 1]
    assert after["epoch"] > before["epoch"]
    assert java_features(bootstrap, "update", "transaction.version", "2", "upgrade") == {
        "ok": True}
    assert java_features(bootstrap, "describe")["finalized"]["transaction.version"] == [2, 2]


# ------------------------------------------------- transaction.version under a live producer


def _set_transaction_version(bootstrap: str, level: int, kind: int) -> None:
    with KafkaWire.connect(bootstrap) as w:
        assert update(w, ("transaction.version", level, kind)).error_code == Error.NONE


def test_switch_transaction_version_under_live_transactional_producer(broker):
    """librdkafka keeps the TV1 protocol (EndTxn v3-4, explicit AddPartitionsToTxn) whatever
    the level, as Kafka 4.x serves it: commits and aborts before, between and after switches
    land, and read_committed sees exactly the committed records."""
    bootstrap = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("tv-switch", 1, 1)])["tv-switch"].result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tv-switch-txn",
                         "linger.ms": 0})
    producer.init_transactions(15)
    expected = []

    def transaction(tag: str, commit: bool) -> None:
        producer.begin_transaction()
        for i in range(3):
            producer.produce("tv-switch", f"{tag}-{i}".encode(), partition=0)
        if commit:
            producer.commit_transaction(15)
            expected.extend(f"{tag}-{i}" for i in range(3))
        else:
            producer.abort_transaction(15)

    transaction("tv2-a", True)
    transaction("tv2-b", False)
    _set_transaction_version(bootstrap, 1, SAFE)
    assert broker.broker.txn_coordinator.transaction_version == 1
    transaction("tv1-a", True)
    transaction("tv1-b", False)
    _set_transaction_version(bootstrap, 0, SAFE)
    transaction("tv0-a", True)
    _set_transaction_version(bootstrap, 2, UPGRADE)
    transaction("tv2-c", True)
    transaction("tv2-d", False)
    producer.flush(10)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tv-switch-reader",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.subscribe(["tv-switch"])
    seen = []
    try:
        for _ in range(100):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.append(msg.value().decode())
            if len(seen) >= len(expected):
                extra = consumer.poll(0.5)
                assert extra is None or extra.error()
                break
    finally:
        consumer.close()
    assert seen == expected
