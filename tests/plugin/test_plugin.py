"""The pytest plugin as a user's suite meets it: pytest run inside this test on a fresh
directory (pytester, in a subprocess) with no conftest code, only `pip install semel`'s
entry point."""

from __future__ import annotations

import json

import pytest

from semel.broker.testing import BrokerThread

CLIENTS = '''
import json, os
from pathlib import Path

from confluent_kafka import Consumer, Producer


def test_produce_subscribe_poll(semel_broker, semel_bootstrap):
    assert semel_bootstrap == semel_broker.bootstrap
    producer = Producer({"bootstrap.servers": semel_bootstrap})
    for i in range(3):
        producer.produce("t", value=b"%d" % i, partition=0)
    producer.flush(10)
    consumer = Consumer({"bootstrap.servers": semel_bootstrap, "group.id": "g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["t"])
    got = []
    while len(got) < 3:
        msg = consumer.poll(10)
        assert msg is not None and not msg.error()
        got.append(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == [b"0", b"1", b"2"]
    group = semel_broker.group("g")
    assert group.offsets == {("t", 0): 3}
    assert semel_broker.broker.config.group_initial_rebalance_delay_ms == 0
    assert [p.partition for p in semel_broker.partitions("t")] == [0, 1, 2]
    Path(os.environ["OUT"]).write_text(json.dumps({"data": str(semel_broker.data_dir)}))
'''


def test_fixtures_with_no_conftest(pytester):
    pytester.makepyfile(test_user=CLIENTS)
    pytester.makeconftest('''
import pytest

@pytest.fixture
def semel_broker_properties():
    return {"num.partitions": "3"}
''')
    out = pytester.path / "out.json"
    pytester._monkeypatch.setenv("OUT", str(out))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    data_dir = json.loads(out.read_text())["data"]
    assert not (pytester.path / data_dir).exists(), "the data directory was left behind"


def test_session_broker_per_xdist_worker(pytester):
    pytester.makepyfile(test_shared='''
import os
import pytest
from pathlib import Path

@pytest.mark.parametrize("n", range(6))
def test_shared(semel_session_broker, n):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "none")
    out = Path(os.environ["OUT_DIR"]) / f"{worker}-{n}"
    out.write_text(semel_session_broker.bootstrap)
''')
    out_dir = pytester.mkdir("out")
    pytester._monkeypatch.setenv("OUT_DIR", str(out_dir))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=6)
    by_worker: dict[str, set[str]] = {}
    for path in out_dir.iterdir():
        by_worker.setdefault(path.name.split("-")[0], set()).add(path.read_text())
    assert set(by_worker) == {"gw0", "gw1"}
    assert all(len(addresses) == 1 for addresses in by_worker.values())
    assert by_worker["gw0"] != by_worker["gw1"]


def test_importing_test_config_collects_no_test(pytester):
    pytester.makepyfile(test_imports='''
from semel.broker.testing import test_config

def test_one():
    assert test_config
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_factory_starts_a_subprocess_broker(pytester):
    pytester.makepyfile(test_factory='''
from kafka import KafkaConsumer, KafkaProducer

def test_two(semel_broker_factory):
    inproc = semel_broker_factory({"auto.create.topics.enable": "true"})
    child = semel_broker_factory(subprocess=True)
    assert child.proc.pid and inproc.bootstrap != child.bootstrap
    producer = KafkaProducer(bootstrap_servers=child.bootstrap)
    producer.send("k", b"v").get(timeout=10)
    producer.close()
    consumer = KafkaConsumer("k", bootstrap_servers=child.bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=3000)
    assert [m.value for m in consumer] == [b"v"]
    consumer.close()
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_a_relative_data_dir_is_the_callers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with BrokerThread("relative/data") as broker:
        assert broker.data_dir == tmp_path / "relative" / "data"
    assert (tmp_path / "relative" / "data").is_dir()


def test_aiokafka_against_the_per_test_broker(semel_broker):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=semel_broker.bootstrap)
        await producer.start()
        await producer.send_and_wait("a", b"x")
        await producer.stop()
        consumer = AIOKafkaConsumer("a", bootstrap_servers=semel_broker.bootstrap,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            batch = await consumer.getmany(timeout_ms=5000)
        finally:
            await consumer.stop()
        return [m.value for msgs in batch.values() for m in msgs]

    assert asyncio.run(run()) == [b"x"]
    assert semel_broker.partition("a", 0).high_watermark == 1


@pytest.mark.parametrize("bad", ["Nope", 999])
def test_unknown_api_names_are_refused(semel_broker, bad):
    with pytest.raises(ValueError, match="unknown api"):
        semel_broker.faults.fail(bad, "NONE")
