"""The durable SCRAM credential store, the --add-scram argument parser and `semel scram`."""

from __future__ import annotations

import base64
import errno
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from semel.broker.cli import main
from semel.broker.security.credentials import (
    CREDENTIALS_FILE,
    ScramCredentialStore,
    parse_scram_argument,
)
from semel.broker.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    make_credential,
    salted_password,
)
from semel.storage.fs import FaultyFileSystem, MetadataFileError

ROOT = Path(__file__).resolve().parents[2]
ALICE = make_credential(SCRAM_SHA_256, "alice-secret", 4096)
ALICE_512 = make_credential(SCRAM_SHA_512, "alice-secret", 8192)
BOB = make_credential(SCRAM_SHA_512, "bob-secret", 16384)


def test_missing_file_is_an_empty_store(tmp_path):
    store = ScramCredentialStore.open(tmp_path / "data")
    assert len(store) == 0 and store.describe() == {}
    assert store.get("alice", "SCRAM-SHA-256") is None
    assert not (tmp_path / "data").exists()  # reading creates nothing


def test_upsert_get_reopen(tmp_path):
    store = ScramCredentialStore.open(tmp_path)
    store.upsert("alice", "SCRAM-SHA-256", ALICE)
    store.upsert("alice", "SCRAM-SHA-512", ALICE_512)
    store.upsert("bob", "SCRAM-SHA-512", BOB)
    reopened = ScramCredentialStore.open(tmp_path)
    assert reopened.get("alice", "SCRAM-SHA-256") == ALICE
    assert reopened.get("alice", "SCRAM-SHA-512") == ALICE_512
    assert reopened.get("bob", "SCRAM-SHA-256") is None
    assert reopened.describe() == {
        "alice": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)],
        "bob": [("SCRAM-SHA-512", 16384)],
    }
    assert reopened.describe(["bob", "nobody"]) == {"bob": [("SCRAM-SHA-512", 16384)]}


def test_upsert_replaces_and_delete_removes(tmp_path):
    store = ScramCredentialStore.open(tmp_path)
    store.upsert("alice", "SCRAM-SHA-256", ALICE)
    newer = make_credential(SCRAM_SHA_256, "changed", 5000)
    store.upsert("alice", "SCRAM-SHA-256", newer)
    assert ScramCredentialStore.open(tmp_path).get("alice", "SCRAM-SHA-256") == newer
    assert store.delete("alice", "SCRAM-SHA-256") is True
    assert store.delete("alice", "SCRAM-SHA-256") is False
    assert ScramCredentialStore.open(tmp_path).describe() == {}


def test_alter_is_one_write_for_many_changes(tmp_path):
    fs = FaultyFileSystem()
    store = ScramCredentialStore.open(tmp_path, fs)
    store.alter(upsertions=[("alice", "SCRAM-SHA-256", ALICE), ("bob", "SCRAM-SHA-512", BOB)])
    store.alter(
        upsertions=[("carol", "SCRAM-SHA-256", ALICE)], deletions=[("alice", "SCRAM-SHA-256")]
    )
    assert fs.fsync_calls[str(tmp_path / CREDENTIALS_FILE) + ".tmp"] == 2
    assert sorted(ScramCredentialStore.open(tmp_path).describe()) == ["bob", "carol"]


def test_the_file_holds_no_password_nor_salted_password(tmp_path):
    salt = b"fixed-salt-1234"
    store = ScramCredentialStore.open(tmp_path)
    store.upsert(
        "alice", "SCRAM-SHA-256", make_credential(SCRAM_SHA_256, "alice-secret", 4096, salt)
    )
    raw = (tmp_path / CREDENTIALS_FILE).read_bytes()
    salted = salted_password(SCRAM_SHA_256, "alice-secret", salt, 4096)
    assert b"alice-secret" not in raw
    assert base64.b64encode(salted) not in raw and salted not in raw
    entry = json.loads(raw)["credentials"][0]
    assert sorted(entry) == ["iterations", "mechanism", "salt", "server_key", "stored_key", "user"]


def test_invalid_credentials_are_refused_before_writing(tmp_path):
    store = ScramCredentialStore.open(tmp_path)
    with pytest.raises(ValueError, match="empty user"):
        store.upsert("", "SCRAM-SHA-256", ALICE)
    with pytest.raises(ValueError, match="unknown mechanism"):
        store.upsert("alice", "SCRAM-SHA-1", ALICE)
    with pytest.raises(ValueError, match="wrong length"):
        store.upsert("alice", "SCRAM-SHA-512", ALICE)  # SHA-256 sized keys
    assert not (tmp_path / CREDENTIALS_FILE).exists()


# ------------------------------------------------------------------------ damage and crashes


def write_valid(path: Path) -> bytes:
    ScramCredentialStore.open(path).upsert("alice", "SCRAM-SHA-256", ALICE)
    return (path / CREDENTIALS_FILE).read_bytes()


def damage_cases(valid: bytes):
    doc = json.loads(valid)
    entry = doc["credentials"][0]

    def variant(**changes):
        return json.dumps({**doc, "credentials": [{**entry, **changes}]}).encode()

    return {
        "empty": b"",
        "garbage": b"\x00\x01not json",
        "truncated": valid[: len(valid) // 2],
        "version": json.dumps({**doc, "version": 2}).encode(),
        "mechanism": variant(mechanism="SCRAM-SHA-1"),
        "iterations": variant(iterations=1),
        "key length": variant(stored_key=base64.b64encode(b"short").decode()),
        "empty salt": variant(salt=""),
        "bad base64": variant(salt="%%%"),
        "type": variant(iterations="4096"),
        "duplicate": json.dumps({**doc, "credentials": [entry, entry]}).encode(),
        "no user": json.dumps(
            {**doc, "credentials": [{k: v for k, v in entry.items() if k != "user"}]}
        ).encode(),
    }


def test_a_damaged_file_is_a_clear_one_line_error_never_an_empty_store(tmp_path):
    valid = write_valid(tmp_path)
    path = tmp_path / CREDENTIALS_FILE
    for name, content in damage_cases(valid).items():
        path.write_bytes(content)
        with pytest.raises(MetadataFileError) as e:
            ScramCredentialStore.open(tmp_path)
        message = str(e.value)
        assert str(path) in message and "\n" not in message, name
        lazy = ScramCredentialStore(tmp_path)  # first use reads the file too
        with pytest.raises(MetadataFileError):
            lazy.get("alice", "SCRAM-SHA-256")


def test_a_torn_temp_file_from_a_crash_is_ignored_and_replaced(tmp_path):
    write_valid(tmp_path)
    tmp = tmp_path / (CREDENTIALS_FILE + ".tmp")
    tmp.write_bytes(b'{"version": 1, "credentials": [{"user": "mallo')  # died mid-write
    store = ScramCredentialStore.open(tmp_path)
    assert store.get("alice", "SCRAM-SHA-256") == ALICE
    store.upsert("bob", "SCRAM-SHA-512", BOB)
    assert not tmp.exists()
    assert set(ScramCredentialStore.open(tmp_path).describe()) == {"alice", "bob"}


@pytest.mark.parametrize("fault", ["torn write", "fsync"])
def test_a_failed_write_changes_neither_memory_nor_disk(tmp_path, fault):
    fs = FaultyFileSystem()
    store = ScramCredentialStore.open(tmp_path, fs)
    store.upsert("alice", "SCRAM-SHA-256", ALICE)
    if fault == "torn write":
        fs.write_error, fs.write_error_after = errno.ENOSPC, 10
    else:
        fs.fsync_error = errno.EIO
    with pytest.raises(OSError):
        store.alter(
            upsertions=[("bob", "SCRAM-SHA-512", BOB)], deletions=[("alice", "SCRAM-SHA-256")]
        )
    assert (
        store.get("alice", "SCRAM-SHA-256") == ALICE and store.get("bob", "SCRAM-SHA-512") is None
    )
    fs.clear_faults()
    fs.simulate_power_loss()
    assert ScramCredentialStore.open(tmp_path).describe() == {"alice": [("SCRAM-SHA-256", 4096)]}


def test_an_acknowledged_change_survives_power_loss(tmp_path):
    fs = FaultyFileSystem()
    store = ScramCredentialStore.open(tmp_path / "data", fs)
    store.upsert("alice", "SCRAM-SHA-256", ALICE)
    store.upsert("bob", "SCRAM-SHA-512", BOB)
    fs.simulate_power_loss()  # cuts back everything not fsynced (file data and dir entries)
    assert set(ScramCredentialStore.open(tmp_path / "data").describe()) == {"alice", "bob"}


def test_survives_kill_9_right_after_the_write(tmp_path):
    code = (
        "import os, signal\n"
        "from broker.security.credentials import ScramCredentialStore\n"
        "from broker.security.scram import SCRAM_SHA_512, make_credential\n"
        f"s = ScramCredentialStore.open({str(tmp_path)!r})\n"
        "s.upsert('alice', 'SCRAM-SHA-512', make_credential(SCRAM_SHA_512, 'pw', 4096, b'salt'))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == -9
    store = ScramCredentialStore.open(tmp_path)
    assert store.get("alice", "SCRAM-SHA-512") == make_credential(
        SCRAM_SHA_512, "pw", 4096, b"salt"
    )


# ------------------------------------------------------------------- --add-scram argument


def test_parse_kafka_add_scram_arguments():
    user, mech, cred = parse_scram_argument("SCRAM-SHA-256=[name=alice,password=alice-secret]")
    assert (user, mech, cred.iterations) == ("alice", "SCRAM-SHA-256", 4096)
    assert cred == make_credential(SCRAM_SHA_256, "alice-secret", 4096, cred.salt)
    user, mech, cred = parse_scram_argument(
        ' SCRAM-SHA-512=[name="bob",password="p,w=x",iterations=8192] '
    )
    assert (user, mech, cred.iterations) == ("bob", "SCRAM-SHA-512", 8192)
    assert cred == make_credential(SCRAM_SHA_512, "p,w=x", 8192, cred.salt)
    salt = base64.b64encode(b"my-salt").decode()
    _, _, fixed = parse_scram_argument(f"SCRAM-SHA-256=[name=c,password=pw,salt={salt}]")
    assert fixed == make_credential(SCRAM_SHA_256, "pw", 4096, b"my-salt")
    salted = base64.b64encode(salted_password(SCRAM_SHA_256, "pw", b"my-salt", 4096)).decode()
    _, _, pre = parse_scram_argument(f"SCRAM-SHA-256=[name=c,salt={salt},saltedpassword={salted}]")
    assert pre == fixed


@pytest.mark.parametrize(
    "argument, expected",
    [
        ("SCRAM-SHA-512", "expected MECHANISM="),
        ("SCRAM-SHA-1=[name=a,password=hunter2-pw]", "not supported"),
        ("SCRAM-SHA-256=name=a,password=hunter2-pw", "in [...]"),
        ("SCRAM-SHA-256=[name=a,password=hunter2-pw", "in [...]"),
        ("SCRAM-SHA-256=[password=hunter2-pw]", "'name'"),
        ("SCRAM-SHA-256=[name=,password=hunter2-pw]", "'name'"),
        ("SCRAM-SHA-256=[name=a]", "one of 'password' or 'saltedpassword'"),
        ("SCRAM-SHA-256=[name=a,password=]", "must not be empty"),
        ("SCRAM-SHA-256=[name=a,saltedpassword=aHVudGVyMi1wdw==]", "'salt' with"),
        ("SCRAM-SHA-256=[name=a,password=hunter2-pw,iterations=4095]", "between 4096 and 16384"),
        ("SCRAM-SHA-256=[name=a,password=hunter2-pw,iterations=16385]", "between"),
        ("SCRAM-SHA-256=[name=a,password=hunter2-pw,iterations=many]", "integer"),
        ("SCRAM-SHA-256=[name=a,password=hunter2-pw,salt=!!]", "base64"),
        ("SCRAM-SHA-256=[name=a,password=hunter2-pw,colour=blue]", "unknown SCRAM configurations"),
        ("SCRAM-SHA-256=[name=a,password=hunter2,-pw]", "no '='"),
    ],
)
def test_bad_arguments_are_one_line_without_the_password(argument, expected):
    with pytest.raises(ValueError) as e:
        parse_scram_argument(argument)
    assert expected in str(e.value)
    assert "hunter2" not in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------ semel scram


def test_cli_adds_credentials_before_the_broker_starts(tmp_path, capsys):
    data = tmp_path / "data"
    assert (
        main(
            [
                "scram",
                "--data-dir",
                str(data),
                "--add",
                "SCRAM-SHA-256=[name=alice,password=alice-secret]",
                "--add",
                "SCRAM-SHA-512=[name=alice,password=alice-secret,iterations=8192]",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "alice" in out and "alice-secret" not in out
    assert ScramCredentialStore.open(data).describe() == {
        "alice": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)]
    }
    assert (
        main(
            [
                "scram",
                "--data-dir",
                str(data),
                "--add",
                "SCRAM-SHA-256=[name=alice,password=new,iterations=5000]",
            ]
        )
        == 0
    )
    assert ScramCredentialStore.open(data).describe()["alice"][0] == ("SCRAM-SHA-256", 5000)


def test_cli_errors_are_one_line_exit_2(tmp_path, capsys):
    data = tmp_path / "data"
    assert (
        main(
            [
                "scram",
                "--data-dir",
                str(data),
                "--add",
                "SCRAM-SHA-256=[name=alice,password=hunter2-pw,iterations=1]",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("semel scram: ") and err.count("\n") == 1 and "hunter2" not in err
    assert not (data / CREDENTIALS_FILE).exists()
    data.mkdir()
    (data / CREDENTIALS_FILE).write_bytes(b"{broken")
    assert (
        main(["scram", "--data-dir", str(data), "--add", "SCRAM-SHA-256=[name=alice,password=pw]"])
        == 2
    )
    err = capsys.readouterr().err
    assert "unreadable SCRAM credentials" in err and err.count("\n") == 1
    assert (data / CREDENTIALS_FILE).read_bytes() == b"{broken"  # not overwritten


def test_cli_refuses_a_directory_a_broker_holds(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    fd = os.open(data / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the running broker's LogManager
        assert (
            main(
                [
                    "scram",
                    "--data-dir",
                    str(data),
                    "--add",
                    "SCRAM-SHA-256=[name=alice,password=pw]",
                ]
            )
            == 2
        )
        assert "in use by a running broker" in capsys.readouterr().err
    finally:
        os.close(fd)
    assert not (data / CREDENTIALS_FILE).exists()
