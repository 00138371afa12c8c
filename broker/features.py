"""Feature flags (KIP-584): supported ranges, finalized levels, UpdateFeatures' rules, and
their file ``<data dir>/__semel_features.json``.

semel answers as a single-node Kafka 4.0 (combined broker and controller) does:

- ``metadata.version`` 7-25 (3.3-IV3 .. 4.0-IV3), finalized 25. semel keeps no KRaft metadata
  log, so the level changes nothing here; it is shown and updatable by Kafka's rules (a
  downgrade across a version that changed the metadata format is refused).
- ``transaction.version`` 0-2, finalized 2 (KIP-890): 0 is Kafka's original protocol, 1 adds
  flexible ``__transaction_state`` values, 2 bumps the producer epoch per transaction. As in
  Kafka, the level tells clients what to use (a Java 4.x producer switches to EndTxn v5 and
  implicit partition adds when it sees 2 in ApiVersions) and sets the coordinator's own choices
  (the ``__transaction_state`` value version, the epoch fence of InitProducerId and of a
  timed-out transaction); each client request is served by its own version (EndTxn v5 and
  Produce v12 are the TV2 protocol whatever the level), so live producers keep working across
  a change.
- ``group.version`` 0-1, finalized 1: 1 enables the KIP-848 consumer group protocol
  (ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION at 0, as in Kafka).

``kraft.version`` and ``eligible.leader.replicas.version`` are left out: they steer the KRaft
quorum and replica election, which one node without a quorum has not.

ApiVersions: below v4 a supported feature whose minimum is 0 is omitted (KAFKA-17492, older
clients cannot parse it); a finalized level of 0 is never listed; the finalized epoch (Kafka:
the metadata log's offset) grows by one with every applied update, so clients notice changes.

The file, JSON, rewritten whole through ``storage.fs``'s ``write_file_atomic`` (temp file,
fsync, rename, fsync the directory)::

    {"version": 1, "epoch": 3, "finalized": {"group.version": 1, "metadata.version": 25,
     "transaction.version": 1}}

A missing file means the defaults above at epoch 0; a damaged one stops the broker with a
``MetadataFileError`` (starting with other levels would silently change client behaviour).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from semel.protocol.errors import Error, KafkaError
from semel.storage.fs import MetadataFileError, RealFileSystem

METADATA_VERSION = "metadata.version"
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"

FEATURES_FILE = "__semel_features.json"
_FILE_VERSION = 1


@dataclass(frozen=True, slots=True)
class FeatureDef:
    name: str
    min_level: int
    max_level: int
    default_level: int


# Kafka 4.0's metadata.version levels: level -> (name, whether it changed the metadata format)
METADATA_VERSIONS: dict[int, tuple[str, bool]] = {
    7: ("3.3-IV3", True), 8: ("3.4-IV0", True), 9: ("3.5-IV0", False),
    10: ("3.5-IV1", False), 11: ("3.5-IV2", True), 12: ("3.6-IV0", False),
    13: ("3.6-IV1", True), 14: ("3.6-IV2", True), 15: ("3.7-IV0", True),
    16: ("3.7-IV1", False), 17: ("3.7-IV2", True), 18: ("3.7-IV3", False),
    19: ("3.7-IV4", False), 20: ("3.8-IV0", False), 21: ("3.9-IV0", False),
    22: ("4.0-IV0", False), 23: ("4.0-IV1", True), 24: ("4.0-IV2", False),
    25: ("4.0-IV3", False), 26: ("4.1-IV0", False),
}
_MV_LATEST_PRODUCTION = 25
_MV_LATEST_TESTING = 26

FEATURES: dict[str, FeatureDef] = {f.name: f for f in (
    FeatureDef(METADATA_VERSION, 7, _MV_LATEST_PRODUCTION, _MV_LATEST_PRODUCTION),
    FeatureDef(TRANSACTION_VERSION, 0, 2, 2),
    FeatureDef(GROUP_VERSION, 0, 1, 1),
)}
# levels of other features each level needs, {feature: {level: {needed feature: level}}}
# (none among these in Kafka 4.0; every level >= 1 needs metadata.version >= 7)
DEPENDENCIES: dict[str, dict[int, dict[str, int]]] = {}


class UpgradeType(IntEnum):
    """FeatureUpdate.UpgradeType codes (UpdateFeatures v1+)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


def _range_text(lo: int, hi: int) -> str:  # Kafka's VersionRange.toString
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _invalid(feature: str, level: int, reason: str) -> KafkaError:
    return KafkaError(Error.INVALID_UPDATE_VERSION,
                      f"Invalid update version {level} for feature {feature}. {reason}")


def _metadata_changed(a: int, b: int) -> bool:
    """Kafka's MetadataVersion.checkIfMetadataChanged between two known levels."""
    high, low = max(a, b), min(a, b)
    level = high
    while level != low and not METADATA_VERSIONS[level][1]:
        level -= 1
    return level != low


def apply_updates(finalized: dict[str, int],
                  updates: Iterable[tuple[str, int, int]], node_id: int) -> dict[str, int]:
    """The finalized levels after ``updates`` ((feature, level, UpgradeType code) each), by
    Kafka 4.0's FeatureControlManager rules, all or nothing: the first bad update raises
    KafkaError(INVALID_UPDATE_VERSION, Kafka's message). A level of 0 removes the feature."""
    proposed = dict(finalized)
    updates = list(updates)
    for name, level, _ in updates:
        proposed[name] = level
    result = dict(finalized)
    for name, level, upgrade_type in updates:
        if upgrade_type not in (UpgradeType.UPGRADE, UpgradeType.SAFE_DOWNGRADE,
                                UpgradeType.UNSAFE_DOWNGRADE):
            raise _invalid(name, level, "The controller does not support the given upgrade type.")
        current = finalized.get(name, 0)
        if level < 0:
            raise _invalid(name, level, "A feature version cannot be less than 0.")
        feature = FEATURES.get(name)
        lo, hi = (feature.min_level, feature.max_level) if feature else (0, 0)
        if not lo <= level <= hi:
            who = f"Local controller {node_id}"
            reason = (f"{who} does not support this feature." if hi == 0
                      else f"{who} only supports versions {_range_text(lo, hi)}")
            raise _invalid(name, level, reason)
        if level < current and upgrade_type == UpgradeType.UPGRADE:
            raise _invalid(name, level, "Can't downgrade the version of this feature without "
                           "setting the upgrade type to either safe or unsafe downgrade.")
        if level > current and upgrade_type != UpgradeType.UPGRADE:
            raise _invalid(name, level, "Can't downgrade to a newer version.")
        if name == METADATA_VERSION:
            if level < current and _metadata_changed(current, level):
                if upgrade_type == UpgradeType.UNSAFE_DOWNGRADE:
                    reason = "Unsafe metadata downgrade is not supported in this version."
                else:
                    reason = ("Refusing to perform the requested downgrade because it might "
                              "delete metadata information.")
                raise KafkaError(Error.INVALID_UPDATE_VERSION,
                                 f"Invalid metadata.version {level}. {reason}")
        else:
            if feature is None:  # level 0 of an unknown feature gets this far, as in Kafka
                raise _invalid(name, level, f"Feature {name} not found.")
            _check_dependencies(name, level, proposed)
        if level == 0:
            result.pop(name, None)
        else:
            result[name] = level
    return result


def _check_dependencies(name: str, level: int, proposed: dict[str, int]) -> None:
    mv = proposed.get(METADATA_VERSION)
    minimum = FEATURES[METADATA_VERSION].min_level
    if level >= 1 and (mv is None or mv < minimum):
        raise _invalid(name, level, f"{name} could not be set to {level} because it depends on "
                       f"metadata.version={minimum} ({METADATA_VERSIONS[minimum][0]})")
    for needed, needed_level in DEPENDENCIES.get(name, {}).get(level, {}).items():
        if proposed.get(needed, 0) < needed_level:
            raise _invalid(name, level, f"{name} could not be set to {level} because it "
                           f"depends on {needed} level {needed_level}")


@functools.cache
def _schema():
    """(msgspec, the file's struct), made on first read or write of the file: a data
    directory without one starts without msgspec (issue 18)."""
    import msgspec

    return msgspec, msgspec.defstruct(
        "_FeaturesFile", [("version", int), ("epoch", int), ("finalized", dict[str, int])],
        forbid_unknown_fields=True)


class FeatureStore:
    """The finalized feature levels of one data directory, read at start and changed by
    UpdateFeatures; readers (ApiVersions, the coordinators) see a change at once."""

    def __init__(self, data_dir: str | Path, fs: RealFileSystem | None = None,
                 node_id: int = 0) -> None:
        self.path = Path(data_dir) / FEATURES_FILE
        self.fs = fs or RealFileSystem()
        self.node_id = node_id
        self.finalized: dict[str, int] = {f.name: f.default_level for f in FEATURES.values()
                                          if f.default_level}
        self.epoch = 0
        self._lock = asyncio.Lock()

    def level(self, name: str) -> int:
        """The finalized level of ``name``; 0 when it is not finalized."""
        return self.finalized.get(name, 0)

    def load(self) -> None:
        """Read the file if there is one; MetadataFileError if it is damaged."""
        if not self.fs.exists(self.path):
            return
        msgspec, file_type = _schema()
        try:
            stored = msgspec.json.decode(self.fs.read_file(self.path), type=file_type)
            if stored.version != _FILE_VERSION:
                raise ValueError(f"unsupported version {stored.version}")
            for name, level in stored.finalized.items():
                feature = FEATURES.get(name)
                if feature is None or not feature.min_level <= level <= feature.max_level:
                    raise ValueError(f"{name} level {level} is not supported")
        except (msgspec.DecodeError, ValueError, OSError) as exc:
            raise MetadataFileError(
                f"{self.path}: unreadable feature levels ({exc}); refusing to start (other "
                "levels would change what clients do). Restore it from a backup, or delete it "
                "to start with the default levels.") from None
        self.finalized = dict(stored.finalized)
        self.epoch = stored.epoch

    def _save(self, finalized: dict[str, int], epoch: int) -> None:
        msgspec, file_type = _schema()
        data = msgspec.json.encode(file_type(_FILE_VERSION, epoch, dict(sorted(
            finalized.items()))))
        self.fs.write_file_atomic(self.path, data)

    async def update(self, updates: list[tuple[str, int, int]], validate_only: bool) -> None:
        """Validate ``updates`` (raises KafkaError) and, unless ``validate_only``, make them
        durable and then effective, with the epoch one higher."""
        async with self._lock:
            finalized = apply_updates(self.finalized, updates, self.node_id)
            if validate_only:
                return
            epoch = self.epoch + 1
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._save, finalized, epoch)
            self.finalized, self.epoch = finalized, epoch

    def supported(self, omit_min_zero: bool) -> list[tuple[str, int, int]]:
        """(name, min, max) for ApiVersions; ``omit_min_zero`` below v4 (KAFKA-17492)."""
        return [(f.name, f.min_level, f.max_level) for f in FEATURES.values()
                if not (omit_min_zero and f.min_level == 0)]

    def finalized_levels(self) -> list[tuple[str, int]]:
        """(name, level) for ApiVersions: level 0 is not listed, as in Kafka."""
        return [(name, level) for name, level in sorted(self.finalized.items()) if level]
