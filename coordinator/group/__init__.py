"""Group coordinator: classic consumer groups and committed offsets in ``__consumer_offsets``.

``shard.GroupCoordinatorShard`` is the pure state (groups, offsets, timers through a keyed
``Timer``, records queued for writing); ``coordinator.GroupCoordinator`` runs it on the
broker's event loop and persists through the storage layer. Importing this package loads the
shell only: the state, its codecs and ``RequestInfo`` (from ``group_manager``) load on first
use, not at broker start.
"""

from semel.coordinator.group.config import GroupConfig
from semel.coordinator.group.coordinator import GROUP_METADATA_TOPIC_NAME, GroupCoordinator

__all__ = ["GROUP_METADATA_TOPIC_NAME", "GroupConfig", "GroupCoordinator", "RequestInfo"]


def __getattr__(name: str):
    if name == "RequestInfo":  # the group request handlers' import: group_manager loads then
        from semel.coordinator.group.group_manager import RequestInfo

        return RequestInfo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
