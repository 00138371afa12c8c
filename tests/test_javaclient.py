"""The Java client harness itself: it compiles, runs, reports failures, and agrees with Python."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import javaclient
import pytest
from javaclient import JavaClientError, expected_checksum, run_java


@pytest.fixture
def dead_bootstrap() -> Iterator[str]:
    """An address where nothing answers: a bound port that is not listening refuses connects."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{s.getsockname()[1]}"


def test_help_lists_every_command() -> None:
    done = subprocess.run(
        javaclient.java_command("--help"), check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    for command in ("produce", "consume", "records", "admin create-topic", "admin list-offsets"):
        assert f"\n  {command} " in done.stdout
    assert done.stderr == ""  # the slf4j no-binding warning is silenced
    assert run_java("--help") == []  # usage is plain text, not JSON lines


def test_records_agree_with_python_helpers() -> None:
    results = run_java(
        "records", "--count", 3, "--start", 7, "--key-prefix", "k", "--value-size", 12, "--dump"
    )
    assert results[:3] == [
        {"type": "record", "index": i, "key": f"k-{i}", "value": f"value-{i}".ljust(12, ".")}
        for i in (7, 8, 9)
    ]
    summary = results[3]
    assert summary["type"] == "records_summary" and summary["count"] == 3
    assert summary["checksum"] == expected_checksum(3, start=7, key_prefix="k", value_size=12)
    [summary] = run_java("records", "--count", 1000, "--value-prefix", "é")
    assert summary["checksum"] == expected_checksum(1000, value_prefix="é")
    assert summary["checksum"] != expected_checksum(1000)


def test_produce_without_a_broker_fails_with_the_java_timeout(dead_bootstrap: str) -> None:
    with pytest.raises(JavaClientError) as info:
        run_java(
            "produce", "--bootstrap", dead_bootstrap, "--topic", "t", "--count", 100,
            "--timeout-ms", 1500, timeout=60,
        )  # fmt: skip
    e = info.value
    assert e.returncode == 1
    assert e.exception_class == "org.apache.kafka.common.errors.TimeoutException"
    assert "not present in metadata" in e.message
    [summary] = e.results
    assert summary["type"] == "produce_summary"
    assert (summary["acked"], summary["errors"], summary["checksum"]) == (0, 1, 0)


def test_admin_and_consume_without_a_broker_fail_cleanly(dead_bootstrap: str) -> None:
    for args in (
        ("admin", "--bootstrap", dead_bootstrap, "--timeout-ms", 1500, "list-topics"),
        ("consume", "--bootstrap", dead_bootstrap, "--topic", "t", "--timeout-ms", 1500),
    ):
        with pytest.raises(JavaClientError) as info:
            run_java(*args, timeout=60)
        assert info.value.returncode == 1
        assert info.value.exception_class.endswith("TimeoutException"), info.value


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("produce", "--topic", "t"), "--bootstrap is required"),
        (("produce", "--bootstrap", "x:1", "--topic", "t", "--colour", "red"), "unknown option"),
        (("nosuch",), "unknown command 'nosuch'"),
        (("admin", "--bootstrap", "x:1", "frobnicate"), "unknown admin subcommand"),
    ],
)
def test_usage_errors_exit_2(args: tuple[str, ...], expected: str) -> None:
    with pytest.raises(JavaClientError) as info:
        run_java(*args)
    assert info.value.returncode == 2
    assert expected in info.value.stderr
    assert info.value.exception_class == ""


def test_without_java_tests_skip_or_fail_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(javaclient.shutil, "which", lambda name: None)
    assert not javaclient.java_available()
    monkeypatch.delenv("SEMEL_REQUIRE_JAVA", raising=False)
    with pytest.raises(pytest.skip.Exception):
        javaclient.require_java()
    monkeypatch.setenv("SEMEL_REQUIRE_JAVA", "1")
    with pytest.raises(pytest.fail.Exception, match="SEMEL_REQUIRE_JAVA=1"):
        javaclient.require_java()


def _fetch_module():
    spec = importlib.util.spec_from_file_location("fetch_java_jars", javaclient.FETCH_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fetch_script_skips_download_when_jars_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetch = _fetch_module()
    assert fetch.JARS == javaclient.JAR_NAMES
    for name in fetch.JARS:
        (tmp_path / f"{name}.jar").write_bytes(b"jar")

    def no_download(*args, **kwargs):
        raise AssertionError("downloaded although every jar was present")

    monkeypatch.setattr(fetch.subprocess, "run", no_download)
    assert fetch.ensure_jars(tmp_path) == [tmp_path / f"{n}.jar" for n in fetch.JARS]
    (tmp_path / "zstd-jni.jar").unlink()
    with pytest.raises(AssertionError, match="downloaded"):
        fetch.ensure_jars(tmp_path)


def test_error_line_with_root_cause_is_parsed() -> None:
    stderr = (
        "org.apache.kafka.common.KafkaException: error state\n\tat Foo.bar(Foo.java:1)\n"
        'SEMEL_CLIENT_ERROR {"class":"org.apache.kafka.common.KafkaException","message":"error'
        ' state","root_class":"org.apache.kafka.common.errors.UnsupportedVersionException",'
        '"root_message":"no INIT_PRODUCER_ID"}\n'
    )
    e = JavaClientError(("produce",), 1, stderr, [], javaclient._error_of(stderr))
    assert (e.exception_class, e.message) == (
        "org.apache.kafka.common.KafkaException",
        "error state",
    )
    assert e.root_class.endswith("UnsupportedVersionException")
    assert "root cause org.apache.kafka.common.errors.UnsupportedVersionException" in str(e)
    plain = JavaClientError(("x",), 2, "usage error: bad\n", [], javaclient._error_of("usage\n"))
    assert (plain.exception_class, plain.root_class, plain.message) == ("", "", "")
    assert "exit status 2" in str(plain)
