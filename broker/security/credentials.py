"""Durable SCRAM credentials: one file in the data directory (the first of ``log.dirs``).

``<data_dir>/__semel_scram_credentials.json``, msgspec JSON written like the topic metadata
(``RealFileSystem.write_file_atomic``: temp file, fsync, rename, fsync the directory), so a
crash leaves the old or the new file, never a mix; a torn ``.tmp`` is ignored and replaced::

    {"version": 1, "credentials": [{"user": "alice", "mechanism": "SCRAM-SHA-256",
      "iterations": 4096, "salt": "<base64>", "stored_key": "<base64>",
      "server_key": "<base64>"}]}

Only salted keys are kept, never a password. A file that cannot be read or fails validation
raises ``MetadataFileError`` with one line naming the file (the broker refuses to start rather
than run with no users). Changes are applied to a copy, written, then swapped in: a failed
write raises OSError and leaves memory and disk as they were. Threading: the event loop only.
The SCRAM module (hashlib, hmac, secrets) loads when a credential is first read, checked or
made: a broker whose data directory holds none starts without it, and without msgspec
(loaded when the file is first read or written).
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from semel.storage.fs import MetadataFileError, RealFileSystem

if TYPE_CHECKING:
    from semel.broker.security.scram import ScramCredential

CREDENTIALS_FILE = "__semel_scram_credentials.json"
VERSION = 1


@functools.cache
def _schema():
    """(msgspec, the file's struct, an entry's struct): made on first read or write."""
    import msgspec

    entry = msgspec.defstruct("_Entry", [
        ("user", str), ("mechanism", str), ("iterations", int), ("salt", bytes),
        ("stored_key", bytes), ("server_key", bytes)])
    return msgspec, msgspec.defstruct("_File", [("version", int),
                                                ("credentials", list[entry])]), entry


Key = tuple[str, str]  # (user, mechanism name)


class ScramCredentialStore:
    """SCRAM credentials by (user, mechanism name). Reads the file on ``load()`` (or on first
    use); every change rewrites it durably before returning."""

    def __init__(self, data_dir: str | Path, fs: RealFileSystem | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / CREDENTIALS_FILE
        self.fs = fs or RealFileSystem()
        self._credentials: dict[Key, ScramCredential] | None = None

    @classmethod
    def open(cls, data_dir: str | Path, fs: RealFileSystem | None = None) -> ScramCredentialStore:
        store = cls(data_dir, fs)
        store.load()
        return store

    def load(self) -> None:
        """(Re)read the file; a missing file is an empty store."""
        if not self.fs.exists(self.path):
            self._credentials = {}
            return
        msgspec, file_type, _ = _schema()
        try:
            stored = msgspec.json.decode(self.fs.read_file(self.path), type=file_type)
            self._credentials = _validated(stored)
        except (msgspec.DecodeError, ValueError) as exc:  # ValidationError is a DecodeError
            raise MetadataFileError(
                f"{self.path}: unreadable SCRAM credentials ({exc}); refusing to continue (the "
                "users it holds could not log in). Restore it from a backup of the data "
                "directory, or remove it and recreate the users with `semel scram`.") from None

    def _all(self) -> dict[Key, ScramCredential]:
        if self._credentials is None:
            self.load()
        assert self._credentials is not None
        return self._credentials

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._all().get((user, mechanism))

    def describe(self, users: Iterable[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        """``{user: [(mechanism, iterations)]}`` for the given users that have credentials
        (all users when None), mechanisms in Kafka's type order."""
        from semel.broker.security.scram import MECHANISMS

        wanted = None if users is None else set(users)
        out: dict[str, list[tuple[str, int]]] = {}
        for (user, mechanism), cred in sorted(self._all().items(),
                                              key=lambda kv: (kv[0][0],
                                                              MECHANISMS[kv[0][1]].type)):
            if wanted is None or user in wanted:
                out.setdefault(user, []).append((mechanism, cred.iterations))
        return out

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self.alter(upsertions=[(user, mechanism, credential)])

    def delete(self, user: str, mechanism: str) -> bool:
        """Remove one credential; False (and no write) when there was none."""
        if (user, mechanism) not in self._all():
            return False
        self.alter(deletions=[(user, mechanism)])
        return True

    def alter(self, upsertions: Iterable[tuple[str, str, ScramCredential]] = (),
              deletions: Iterable[Key] = ()) -> None:
        """Apply all changes with one durable write (all or nothing)."""
        updated = dict(self._all())
        for user, mechanism in deletions:
            updated.pop((user, mechanism), None)
        for user, mechanism, credential in upsertions:
            _check(user, mechanism, credential)
            updated[(user, mechanism)] = credential
        self._write(updated)
        self._credentials = updated

    def __len__(self) -> int:
        return len(self._all())

    def _write(self, credentials: dict[Key, ScramCredential]) -> None:
        msgspec, file_type, entry = _schema()
        entries = [entry(user, mechanism, c.iterations, c.salt, c.stored_key, c.server_key)
                   for (user, mechanism), c in sorted(credentials.items())]
        data = msgspec.json.format(msgspec.json.encode(file_type(VERSION, entries)))
        self.fs.mkdir(self.data_dir)
        self.fs.write_file_atomic(self.path, data)


def _check(user: str, mechanism: str, c: ScramCredential) -> None:
    from semel.broker.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS

    if not user:
        raise ValueError("empty user name")
    mech = MECHANISMS.get(mechanism)
    if mech is None:
        raise ValueError(f"unknown mechanism {mechanism!r}")
    if not MIN_ITERATIONS <= c.iterations <= MAX_ITERATIONS:
        raise ValueError(f"{mechanism} credential of {user!r}: iterations {c.iterations} "
                         f"outside {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    if not c.salt:
        raise ValueError(f"{mechanism} credential of {user!r}: empty salt")
    if len(c.stored_key) != mech.digest_size or len(c.server_key) != mech.digest_size:
        raise ValueError(f"{mechanism} credential of {user!r}: keys of the wrong length")


def _validated(stored) -> dict[Key, ScramCredential]:
    from semel.broker.security.scram import ScramCredential

    if stored.version != VERSION:
        raise ValueError(f"unknown version {stored.version}")
    out: dict[Key, ScramCredential] = {}
    for e in stored.credentials:
        credential = ScramCredential(e.salt, e.stored_key, e.server_key, e.iterations)
        _check(e.user, e.mechanism, credential)
        if (e.user, e.mechanism) in out:
            raise ValueError(f"{e.mechanism} credential of {e.user!r} listed twice")
        out[(e.user, e.mechanism)] = credential
    return out


def parse_scram_argument(text: str) -> tuple[str, str, ScramCredential]:
    """Kafka's ``kafka-storage format --add-scram`` argument: ``MECHANISM=[name=N,password=P]``
    with optional ``iterations=I`` and ``salt=B64``, or ``saltedpassword=B64`` (with ``salt``)
    instead of the password; values may be double-quoted (a quoted value may hold commas).
    Returns (user, mechanism name, credential). ValueError messages never hold a password."""
    from semel.broker.security.scram import (
        DEFAULT_ITERATIONS,
        MAX_ITERATIONS,
        MECHANISMS,
        MIN_ITERATIONS,
        credential_from_salted_password,
        make_credential,
    )

    mechanism_name, sep, rest = text.strip().partition("=")
    if not sep:
        raise ValueError("expected MECHANISM=[name=...,password=...]")
    mechanism = MECHANISMS.get(mechanism_name)
    if mechanism is None:
        raise ValueError(f"SCRAM mechanism {mechanism_name!r} is not supported "
                         f"(use {' or '.join(MECHANISMS)})")
    if not rest.startswith("[") or not rest.endswith("]"):
        raise ValueError("expected the configuration in [...] after the mechanism")
    fields: dict[str, str] = {}
    for component in _split_components(rest[1:-1]):
        key, sep, value = component.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"no '=' in a SCRAM component (after {', '.join(fields) or 'the ['})")
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        fields[key] = value
    name = fields.pop("name", None)
    if not name:
        raise ValueError("you must supply a non-empty 'name'")
    try:
        salt = _b64(fields.pop("salt")) if "salt" in fields else None
        iterations = int(fields.pop("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise ValueError("'salt' must be base64 and 'iterations' an integer") from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"'iterations' must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    password = fields.pop("password", None)
    salted = fields.pop("saltedpassword", None)
    if fields:
        raise ValueError(f"unknown SCRAM configurations: {', '.join(sorted(fields))}")
    if password is not None:
        if not password:
            raise ValueError("'password' must not be empty")
        return name, mechanism.name, make_credential(mechanism, password, iterations, salt)
    if salted is None:
        raise ValueError("you must supply one of 'password' or 'saltedpassword'")
    if salt is None:
        raise ValueError("you must supply 'salt' with 'saltedpassword'")
    try:
        salted_bytes = _b64(salted)
    except ValueError:
        raise ValueError("'saltedpassword' must be base64") from None
    return name, mechanism.name, credential_from_salted_password(
        mechanism, salt, salted_bytes, iterations)


def _split_components(text: str) -> list[str]:
    parts, current, quoted = [], [], False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _b64(text: str) -> bytes:
    try:
        value = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError("invalid base64") from None
    if not value:
        raise ValueError("empty value")
    return value
