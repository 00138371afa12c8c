"""Producer ids bound to the principal that obtained them (coordinator/producer_principal.py):
the idempotent file (durability, group commit, failed writes, expiration), the
``__transaction_state`` tag, and the transaction coordinator binding the ids of its
transactional ids across epoch bumps, rotations, restarts and expiration."""

from __future__ import annotations

import asyncio
import errno

import pytest

from semel.coordinator.producer_principal import FILE, ProducerPrincipals, decode, encode
from semel.coordinator.transaction.log import (
    TAG_SEMEL_PRINCIPAL,
    TxnLogValue,
    decode_value,
    encode_value,
    metadata_from_value,
    value_from_transit,
)
from semel.coordinator.transaction.metadata import MAX_PRODUCER_EPOCH, TV_2
from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import Error, KafkaError
from semel.protocol.primitives import read_tagged_header, read_uvarint
from semel.storage.fs import FaultyFileSystem, MetadataFileError
from semel.storage.topic_partition import TopicPartition
from tests.coordinator.txn_harness import ManualClock, running

ALICE, BOB = "User:alice", "User:bob"
T0 = TopicPartition("t", 0)


# -- the idempotent file ---------------------------------------------------------------------

def test_file_round_trip_and_damage():
    bindings = {7: (ALICE, 100), 1000: ("User:CN=x,O=y", 5)}
    assert decode(encode(bindings)) == bindings
    for bad in (b"", b"{}", b'{"version": 2, "producers": {}}',
                b'{"version": 1, "producers": {"-1": ["User:a", 0]}}',
                b'{"version": 1, "producers": {"1": [3, 0]}}'):
        with pytest.raises(ValueError):
            decode(bad)


async def test_idempotent_binding_is_on_disk_before_it_is_answered(tmp_path):
    principals = ProducerPrincipals(tmp_path)
    principals.load()  # no file yet
    await principals.bind_idempotent(5, ALICE, 1_000)
    assert principals.owner(5) == ALICE and principals.owner(6) is None
    assert decode((tmp_path / FILE).read_bytes()) == {5: (ALICE, 1_000)}
    again = ProducerPrincipals(tmp_path)
    again.load()
    assert again.owner(5) == ALICE


async def test_concurrent_bindings_share_writes(tmp_path):
    fs = FaultyFileSystem()
    principals = ProducerPrincipals(tmp_path, fs)
    await asyncio.gather(*(principals.bind_idempotent(pid, ALICE, 0) for pid in range(50)))
    assert len(decode((tmp_path / FILE).read_bytes())) == 50
    assert fs.fsync_calls[str(tmp_path / FILE) + ".tmp"] <= 3  # group commit, not 50


async def test_failed_write_refuses_the_id(tmp_path):
    fs = FaultyFileSystem()
    principals = ProducerPrincipals(tmp_path, fs)
    await principals.bind_idempotent(1, ALICE, 0)
    fs.write_error = errno.ENOSPC
    with pytest.raises(KafkaError) as e:
        await principals.bind_idempotent(2, BOB, 0)
    assert e.value.code == Error.COORDINATOR_LOAD_IN_PROGRESS
    assert principals.owner(2) is None and principals.owner(1) == ALICE
    fs.clear_faults()
    await principals.bind_idempotent(3, BOB, 0)
    assert decode((tmp_path / FILE).read_bytes()) == {1: (ALICE, 0), 3: (BOB, 0)}


def test_damaged_file_stops_the_start(tmp_path):
    (tmp_path / FILE).write_text('{"version": 1, "produc')
    with pytest.raises(MetadataFileError, match=FILE):
        ProducerPrincipals(tmp_path).load()


async def test_expiration_keeps_ids_still_in_use(tmp_path):
    principals = ProducerPrincipals(tmp_path, expiration_ms=1_000)
    await principals.bind_idempotent(1, ALICE, 0)
    await principals.bind_idempotent(2, ALICE, 0)
    await principals.bind_idempotent(3, ALICE, 900)
    principals.bind([50], BOB)  # a transactional id's: not the file's to expire
    assert await principals.expire(1_500, live_producer_ids={2}) == 1
    assert [principals.owner(p) for p in (1, 2, 3, 50)] == [None, ALICE, ALICE, BOB]
    assert set(decode((tmp_path / FILE).read_bytes())) == {2, 3}
    assert await principals.expire(1_500, live_producer_ids={2}) == 0


# -- the __transaction_state tag -------------------------------------------------------------

def _tags(data: bytes) -> list[int]:
    value = decode_value(data)
    # the tagged-field section is the value's tail: walk it as Kafka's reader would
    tail = memoryview(data)[len(encode_value(
        TxnLogValue(value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                    value.transaction_status, value.transaction_partitions,
                    value.transaction_last_update_timestamp_ms,
                    value.transaction_start_timestamp_ms), 1)) - 1:]
    count, pos = read_uvarint(tail, 0)
    tags = []
    for _ in range(count):
        tag, end, pos = read_tagged_header(tail, pos)
        tags.append(tag)
        pos = end
    return tags


def test_principal_travels_in_a_tagged_field():
    value = TxnLogValue(1000, 3, 60000, int(TransactionState.ONGOING), [("t", [0, 1])], 5, 4,
                        client_transaction_version=TV_2, principal=ALICE)
    data = encode_value(value, 1)
    assert decode_value(data) == value
    assert _tags(data) == [2, TAG_SEMEL_PRINCIPAL]
    md = metadata_from_value("tx", decode_value(data))
    assert md.principal == ALICE
    assert value_from_transit(md.snapshot()).principal == ALICE
    # without a principal the record is byte for byte what it was (Kafka's)
    value.principal = None
    assert TAG_SEMEL_PRINCIPAL not in _tags(encode_value(value, 1))


# -- the transaction coordinator ---------------------------------------------------------------

async def test_transactional_ids_bind_their_producer_ids(tmp_path):
    principals = ProducerPrincipals(tmp_path / "p")
    async with running(tmp_path, principals=principals,
                       transaction_version=TV_2) as env:
        tc = env.tc
        first = await tc.init_producer_id("tx", 60000, principal=ALICE)
        assert principals.owner(first.producer_id) == ALICE
        assert tc.txns["tx"].principal == ALICE
        # an epoch bump by the same principal keeps the binding
        bumped = await tc.init_producer_id("tx", 60000, principal=ALICE)
        assert bumped.producer_id == first.producer_id
        assert principals.owner(first.producer_id) == ALICE
        # epoch exhaustion: the new producer id goes to whoever asked
        tc.txns["tx"].producer_epoch = MAX_PRODUCER_EPOCH - 1
        rotated = await tc.init_producer_id("tx", 60000, principal=ALICE)
        assert rotated.producer_id != first.producer_id
        assert principals.owner(rotated.producer_id) == ALICE
        # transaction version 2 overflow at EndTxn: the next producer id is the same principal's
        assert await tc.add_partitions("tx", rotated.producer_id, rotated.producer_epoch, [T0],
                                       client_transaction_version=TV_2) == Error.NONE
        tc.txns["tx"].producer_epoch = MAX_PRODUCER_EPOCH - 1
        ended = await tc.end_txn("tx", rotated.producer_id, MAX_PRODUCER_EPOCH - 1, True,
                                 client_transaction_version=TV_2)
        assert ended.error == Error.NONE and ended.producer_id != rotated.producer_id
        assert principals.owner(ended.producer_id) == ALICE
        await tc.wait_completions()
        assert tc.txns["tx"].producer_id == ended.producer_id
        # another principal allowed on the id takes it over (fencing alice): the id is its now
        taken = await tc.init_producer_id("tx", 60000, principal=BOB)
        assert principals.owner(taken.producer_id) == BOB
        # an InitProducerId without a principal (binding off) records nothing
        plain = await tc.init_producer_id("plain", 60000)
        assert principals.owner(plain.producer_id) is None
        owned = taken.producer_id
    # a restart reloads the bindings from __transaction_state
    principals = ProducerPrincipals(tmp_path / "p")
    async with running(tmp_path, principals=principals) as env:
        assert principals.owner(owned) == BOB
        assert env.tc.txns["tx"].principal == BOB


async def test_expired_transactional_id_forgets_its_binding(tmp_path):
    clock = ManualClock()
    principals = ProducerPrincipals(tmp_path / "p")
    async with running(tmp_path, clock=clock, principals=principals,
                       transactional_id_expiration_ms=5_000) as env:
        result = await env.tc.init_producer_id("tx", 60000, principal=ALICE)
        assert principals.owner(result.producer_id) == ALICE
        clock.advance(10_000)
        assert await env.tc.remove_expired_transactional_ids() == 1
        assert principals.owner(result.producer_id) is None


async def test_transaction_version_0_still_persists_the_principal(tmp_path):
    principals = ProducerPrincipals(tmp_path / "p")
    async with running(tmp_path, principals=principals, transaction_version=0) as env:
        result = await env.tc.init_producer_id("tx", 60000, principal=ALICE)
    principals = ProducerPrincipals(tmp_path / "p")
    async with running(tmp_path, principals=principals, transaction_version=0) as env:
        assert principals.owner(result.producer_id) == ALICE
