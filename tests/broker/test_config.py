"""broker.config and broker.properties: parsing, precedence, validation, and the shipped docs."""

from __future__ import annotations

import dataclasses
import re
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semel.broker.config import (
    ALIASES,
    KNOWN_KEYS,
    PROPERTIES,
    BrokerConfig,
    ConfigError,
    Endpoint,
    Listener,
    apply_cli_options,
    env_var_name,
    load_config,
)
from semel.broker.properties import PropertiesSyntaxError, parse_properties

ROOT = Path(__file__).resolve().parents[2]
SERVER_PROPERTIES = ROOT / "conf" / "server.properties"


def load(*overrides: str, env: dict[str, str] | None = None, **kw) -> BrokerConfig:
    return load_config(None, list(overrides), env or {}, **kw)


def error_of(*overrides: str, env: dict[str, str] | None = None, **kw) -> str:
    with pytest.raises(ConfigError) as info:
        load(*overrides, env=env, **kw)
    message = str(info.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- properties syntax


def pairs(text: str) -> list[tuple[str, str]]:
    return [(p.key, p.value) for p in parse_properties(text)]


def test_separators_and_surrounding_blanks() -> None:
    assert pairs("a=1\nb: 2\nc 3\n  d =  4  \ne\t:\t5\nf\n") == [
        ("a", "1"),
        ("b", "2"),
        ("c", "3"),
        ("d", "4  "),
        ("e", "5"),
        ("f", ""),
    ]


def test_value_may_contain_separators() -> None:
    assert pairs("listeners=PLAINTEXT://h:1\nx = =y:z") == [
        ("listeners", "PLAINTEXT://h:1"),
        ("x", "=y:z"),
    ]


def test_comments_and_blank_lines() -> None:
    text = "# comment\n   ! bang comment\n\n   \nkey=value # not a comment\n"
    assert pairs(text) == [("key", "value # not a comment")]


def test_continuation_lines_drop_leading_blanks() -> None:
    text = "a=one, \\\n    two, \\\n\tthree\nb=x\\\\\nc=y"
    assert pairs(text) == [("a", "one, two, three"), ("b", "x\\"), ("c", "y")]


def test_comment_line_is_not_continued() -> None:
    assert pairs("# note \\\nk=v") == [("k", "v")]


def test_continuation_at_end_of_file_keeps_what_it_has() -> None:
    assert pairs("k=v\\") == [("k", "v")]


def test_escapes_in_keys_and_values() -> None:
    text = "a\\=b\\ c=1\nt=\\t\\n\\r\\f\\q\nu=\\u00e9\\u0041"
    assert pairs(text) == [("a=b c", "1"), ("t", "\t\n\r\fq"), ("u", "éA")]


def test_malformed_unicode_escape_reports_its_line() -> None:
    with pytest.raises(PropertiesSyntaxError) as info:
        parse_properties("ok=1\n\nbad=\\u12x4\n")
    assert info.value.line == 3


def test_only_cr_and_lf_end_lines() -> None:
    assert pairs("a=x\x85y\u2028z\x0bw\nk\fv") == [("a", "x\x85y\u2028z\x0bw"), ("k", "v")]


def test_line_numbers_crlf_and_bom() -> None:
    lines = parse_properties("\ufeffa=1\r\n# c\r\nb=2\\\r\n 3\rc=4")
    assert [(p.key, p.value, p.line) for p in lines] == [
        ("a", "1", 1),
        ("b", "23", 3),
        ("c", "4", 5),
    ]


def _escape(s: str, *, key: bool) -> str:
    """Java Properties.store-style escaping, written independently of the parser."""
    out = []
    for i, c in enumerate(s):
        if c == "\\":
            out.append("\\\\")
        elif c in "=:#!":
            out.append("\\" + c)
        elif c == " " and (key or i == 0):
            out.append("\\ ")
        elif c in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[c])
        elif not c.isprintable() or ord(c) > 0x7E:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


bmp_text = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=20)


@given(st.lists(st.tuples(bmp_text.filter(bool), bmp_text), max_size=5))
def test_escaped_pairs_round_trip(items: list[tuple[str, str]]) -> None:
    text = "".join(f"{_escape(k, key=True)}={_escape(v, key=False)}\n" for k, v in items)
    assert pairs(text) == items


# --------------------------------------------------------------------------- defaults


def test_defaults_are_kafkas_except_where_noted() -> None:
    c = load()
    assert c == BrokerConfig()
    assert c.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert c.listener == Listener("PLAINTEXT", "127.0.0.1", 9092)
    assert c.advertised_listeners == ()
    assert c.log_dirs == "./data"
    assert c.log_segment_bytes == 1073741824
    assert c.log_roll_ms == c.log_retention_ms == 168 * 3600 * 1000
    assert c.log_retention_bytes == -1
    assert c.message_max_bytes == 1048588
    assert c.socket_request_max_bytes == 104857600
    assert c.log_flush_mode == "fsync"
    assert c.log_message_timestamp_type == "CreateTime"
    assert c.auto_create_topics_enable is True
    assert c.allow_replication_factor_overcommit is False
    assert c.transaction_max_timeout_ms == 900000
    assert c.transactional_id_expiration_ms == 604800000
    assert c.producer_id_expiration_ms == 86400000
    assert c.transaction_partition_verification_enable is True
    assert c.offsets_topic_num_partitions == c.transaction_state_log_num_partitions == 50
    assert c.metrics_listener is None


def test_every_field_is_a_property_named_after_it() -> None:
    names = [f.name for f in dataclasses.fields(BrokerConfig)
             if f.name not in ("listener_overrides", "static_keys")]
    assert [n.replace("_", ".") for n in names] == list(PROPERTIES)
    for name, spec in PROPERTIES.items():
        assert spec.name == name and spec.doc
    assert set(ALIASES).isdisjoint(PROPERTIES)
    assert all(a.target in PROPERTIES for a in ALIASES.values())


def test_as_properties_round_trips_through_the_loader() -> None:
    changed = load(
        "advertised.listeners=PLAINTEXT://broker.example:19092",
        "metrics.listener=[::1]:9308",
        "log.retention.ms=-1",
        "log.flush.mode=none",
        "auto.create.topics.enable=false",
        port=0,
    )
    for config in (BrokerConfig(), changed):
        text = config.as_properties()
        assert list(text) == list(PROPERTIES)
        assert load(*(f"{k}={v}" for k, v in text.items())) == config


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        BrokerConfig().node_id = 3  # type: ignore[misc]


# --------------------------------------------------------------------------- conf/server.properties

_DOCUMENTED = re.compile(r"^#([a-z][a-z0-9.]*)=(.*)$")


def documented_defaults() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in SERVER_PROPERTIES.read_text(encoding="utf-8").splitlines():
        m = _DOCUMENTED.match(line)
        if m:
            assert m.group(1) not in found, f"{m.group(1)} documented twice"
            found[m.group(1)] = m.group(2)
    return found


def test_shipped_file_parses_to_the_defaults() -> None:
    assert parse_properties(SERVER_PROPERTIES.read_text(encoding="utf-8")) == []
    assert load_config(SERVER_PROPERTIES, [], {}) == BrokerConfig()


def test_shipped_file_documents_exactly_the_known_keys() -> None:
    assert set(documented_defaults()) == KNOWN_KEYS


@pytest.mark.parametrize("key", sorted(KNOWN_KEYS))
def test_documented_value_is_the_default(key: str) -> None:
    value = documented_defaults()[key]
    assert load(f"{key}={value}") == BrokerConfig(), f"{key}={value} is not the default"


def test_uncommented_file_is_read(tmp_path: Path) -> None:
    f = tmp_path / "s.properties"
    f.write_text("# mine\nnum.partitions = 3\nlog.dirs: /srv/semel\\\n  /data\n", encoding="utf-8")
    c = load_config(f, [], {})
    assert (c.num_partitions, c.log_dirs) == (3, "/srv/semel/data")


# --------------------------------------------------------------------------- sources and precedence


def test_precedence_file_env_set_cli(tmp_path: Path) -> None:
    f = tmp_path / "s.properties"
    f.write_text(
        "num.partitions=2\nnode.id=1\nlog.segment.bytes=1000\nlog.dirs=/file\n"
        "listeners=PLAINTEXT://0.0.0.0:9000\n"
    )
    env = {"SEMEL_NODE_ID": "5", "SEMEL_LOG_SEGMENT_BYTES": "2000", "SEMEL_LOG_DIRS": "/env"}
    c = load_config(f, ["log.segment.bytes=3000", "log.dirs=/set"], env, port=9100)
    assert c.num_partitions == 2  # file
    assert c.node_id == 5  # env over file
    assert c.log_segment_bytes == 3000  # --set over env
    assert c.listener == Listener("PLAINTEXT", "0.0.0.0", 9100)  # --port keeps the file's host
    assert c.log_dirs == "/set"
    assert load_config(f, ["log.dirs=/set"], env, data_dir="/cli").log_dirs == "/cli"


def test_later_set_wins() -> None:
    assert load("num.partitions=2", "num.partitions=7").num_partitions == 7


def test_last_occurrence_in_file_wins(tmp_path: Path) -> None:
    f = tmp_path / "s.properties"
    f.write_text("num.partitions=2\nnum.partitions=4\n")
    assert load_config(f, [], {}).num_partitions == 4


def test_environment_names() -> None:
    assert (
        env_var_name("log.retention.check.interval.ms") == "SEMEL_LOG_RETENTION_CHECK_INTERVAL_MS"
    )
    env = {
        "SEMEL_LOG_FLUSH_MODE": "none",
        "SEMEL_AUTO_CREATE_TOPICS_ENABLE": "FALSE",
        "SEMEL_REQUIRE_JAVA": "1",  # tooling, not a property
        "SEMEL_LOG_LEVEL": "DEBUG",  # the CLI's, not a property
        "LOG_DIRS": "/ignored",  # no prefix
        "PATH": "/usr/bin",
    }
    c = load(env=env)
    assert (c.log_flush_mode, c.auto_create_topics_enable, c.log_dirs) == ("none", False, "./data")


def test_every_property_settable_from_environment() -> None:
    text = BrokerConfig().as_properties()
    env = {env_var_name(k): v for k, v in text.items()}
    assert load(env=env) == BrokerConfig()


def test_retention_precedence_within_one_source_ignores_order() -> None:
    c = load("log.retention.hours=1", "log.retention.ms=5000", "log.retention.minutes=2")
    assert c.log_retention_ms == 5000
    assert load("log.retention.hours=1", "log.retention.minutes=2").log_retention_ms == 120_000
    assert load("log.retention.hours=3").log_retention_ms == 3 * 3_600_000
    assert load("log.retention.minutes=-1").log_retention_ms == -1
    assert load("log.roll.hours=2").log_roll_ms == 7_200_000
    assert load("log.roll.hours=2", "log.roll.ms=10").log_roll_ms == 10


def test_retention_in_a_later_source_replaces_the_earlier_group(tmp_path: Path) -> None:
    f = tmp_path / "s.properties"
    f.write_text("log.retention.ms=5000\nlog.dir=/old\n")
    assert load_config(f, [], {}).log_retention_ms == 5000
    assert load_config(f, ["log.retention.hours=1"], {}).log_retention_ms == 3_600_000
    assert load_config(f, [], {"SEMEL_LOG_RETENTION_MINUTES": "1"}).log_retention_ms == 60_000


def test_log_dir_is_used_only_without_log_dirs() -> None:
    assert load("log.dir=/a").log_dirs == "/a"
    assert load("log.dirs=/b", "log.dir=/a").log_dirs == "/b"


def test_listener_forms() -> None:
    assert load("listeners=PLAINTEXT://:0").listener == Listener("PLAINTEXT", "", 0)
    assert load("listeners=plaintext://[::1]:9093").listener == Listener("PLAINTEXT", "::1", 9093)
    assert str(Listener("PLAINTEXT", "::1", 9093)) == "PLAINTEXT://[::1]:9093"
    assert load("listeners= PLAINTEXT://localhost:1 ").listener.host == "localhost"
    assert load("metrics.listener=127.0.0.1:0").metrics_listener == Endpoint("127.0.0.1", 0)
    assert load("metrics.listener=").metrics_listener is None


# --------------------------------------------------------------------------- CLI shortcuts


def test_host_and_port_rewrite_the_listener() -> None:
    assert load(host="0.0.0.0").listener == Listener("PLAINTEXT", "0.0.0.0", 9092)
    assert load(port=0).listener == Listener("PLAINTEXT", "127.0.0.1", 0)
    assert load("listeners=PLAINTEXT://10.0.0.1:1", host="::1", port=2).listener == Listener(
        "PLAINTEXT", "::1", 2
    )
    assert load(data_dir="/tmp/x").log_dirs == "/tmp/x"
    config = BrokerConfig()
    assert apply_cli_options(config) is config


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"port": 65536}, "--port: 65536 is out of range (expected 0..65535)"),
        ({"port": -1}, "--port: -1 is out of range"),
        ({"host": "a b"}, "--host: cannot use 'a b'"),
        ({"data_dir": " "}, "--data-dir: expected a directory"),
    ],
)
def test_cli_shortcut_errors(kw: dict, expected: str) -> None:
    assert error_of(**kw).startswith(expected)


# --------------------------------------------------------------------------- advertised address


def test_advertised_listener_defaults_to_the_bound_address() -> None:
    assert load(port=0).advertised_listener(41234) == Listener("PLAINTEXT", "127.0.0.1", 41234)
    wildcard = load("listeners=PLAINTEXT://0.0.0.0:9092")
    assert wildcard.advertised_listener(9092) == Listener("PLAINTEXT", socket.gethostname(), 9092)


def test_advertised_listeners_override_and_port_zero_means_bound() -> None:
    c = load("advertised.listeners=PLAINTEXT://kafka.local:29092", port=0)
    assert c.advertised_listener(5555) == Listener("PLAINTEXT", "kafka.local", 29092)
    c = load("advertised.listeners=PLAINTEXT://kafka.local:0", port=0)
    assert c.advertised_listener(5555) == Listener("PLAINTEXT", "kafka.local", 5555)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("log.segment.bytes=abc", "log.segment.bytes: expected an integer, got 'abc'"),
        ("log.segment.bytes=1e6", "log.segment.bytes: expected an integer, got '1e6'"),
        ("log.segment.bytes=13", "log.segment.bytes: 13 is out of range (expected 14..2147483647)"),
        ("log.segment.bytes=2147483648", "log.segment.bytes: 2147483648 is out of range"),
        ("num.partitions=0", "num.partitions: 0 is out of range (expected 1..2147483647)"),
        ("log.retention.ms=0", "log.retention.ms: 0 is out of range (expected -1 or at least 1)"),
        ("log.retention.hours=0", "log.retention.hours: 0 is out of range (expected -1 or 1.."),
        ("log.roll.hours=0", "log.roll.hours: 0 is out of range"),
        ("queued.max.request.bytes=0", "queued.max.request.bytes: 0 is out of range"),
        ("delete.topic.enable=yes", "delete.topic.enable: expected true or false, got 'yes'"),
        ("log.flush.mode=always", "log.flush.mode: expected one of fsync, none, got 'always'"),
        (
            "log.message.timestamp.type=createtime",
            "log.message.timestamp.type: expected one of CreateTime, LogAppendTime",
        ),
        (
            "listeners=localhost:9092",
            "listeners: cannot parse 'localhost:9092' (expected NAME://host:port",
        ),
        ("listeners=PLAINTEXT://h:99999", "listeners: port 99999 is out of range"),
        ("listeners=PLAINTEXT://h", "listeners: cannot parse 'PLAINTEXT://h'"),
        ("listeners=TRACE://h:9093", "listeners: no security protocol defined for listener TRACE"),
        ("listeners=PLAINTEXT://a:1,plaintext://b:2", "listeners: each listener must have a diff"),
        ("listeners=PLAINTEXT://a:1,SSL://b:1", "listeners: each listener must have a different"),
        ("listeners=", "listeners: at least one listener is required"),
        ("advertised.listeners=PLAINTEXT://0.0.0.0:9092", "advertised.listeners: 'PLAINTEXT://"),
        ("advertised.listeners=PLAINTEXT://:9092", "advertised.listeners: 'PLAINTEXT://:9092' can"),
        ("metrics.listener=9308", "metrics.listener: cannot parse '9308' (expected host:port"),
        ("log.dirs=/a,/b", "log.dirs: only one directory is supported, got 2"),
        ("log.dirs= ", "log.dirs: expected a directory, got an empty value"),
        ("group.min.session.timeout.ms=1900000", "group.min.session.timeout.ms (1900000) must not"),
    ],
)
def test_invalid_values(setting: str, expected: str) -> None:
    message = error_of(setting)
    assert message.startswith(expected), message


def test_value_errors_name_their_origin(tmp_path: Path) -> None:
    assert error_of("node.id=x").endswith("(--set 'node.id=x')")
    assert error_of(env={"SEMEL_NODE_ID": "x"}).endswith("(environment variable SEMEL_NODE_ID)")
    f = tmp_path / "bad.properties"
    f.write_text("# header\n\nnode.id = x\n")
    with pytest.raises(ConfigError, match=re.escape(f"(in {f} line 3)")):
        load_config(f, [], {})


def test_unknown_keys_suggest_the_closest(tmp_path: Path) -> None:
    assert error_of("log.segment.byte=1") == (
        "unknown property 'log.segment.byte' (--set 'log.segment.byte=1'); "
        "did you mean 'log.segment.bytes'?"
    )
    assert error_of("zzz=1") == "unknown property 'zzz' (--set 'zzz=1')"
    message = error_of(env={"SEMEL_LOG_RETENTION_HOUR": "1"})
    assert message.endswith("did you mean SEMEL_LOG_RETENTION_HOURS?")
    f = tmp_path / "s.properties"
    f.write_text("auto.create.topic.enable=true\n")
    with pytest.raises(ConfigError, match="line 1.*did you mean 'auto.create.topics.enable'"):
        load_config(f, [], {})


def test_malformed_overrides_and_files(tmp_path: Path) -> None:
    assert error_of("num.partitions") == "--set expects key=value, got 'num.partitions'"
    assert error_of("=3") == "--set expects key=value, got '=3'"
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.properties", [], {})
    f = tmp_path / "bad.properties"
    f.write_text("a=\\uZZZZ\n")
    with pytest.raises(ConfigError, match=r"bad.properties line 1: malformed \\uXXXX escape"):
        load_config(f, [], {})
    f.write_bytes(b"node.id=\xff\n")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_config(f, [], {})
