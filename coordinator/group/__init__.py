"""Group coordinator: classic consumer groups and committed offsets in ``__consumer_offsets``.

``shard.GroupCoordinatorShard`` is the pure state (groups, offsets, timers through a keyed
``Timer``, records queued for writing); ``coordinator.GroupCoordinator`` runs it on the
broker's event loop and persists through the storage layer.
"""

from semel.coordinator.group.config import GroupConfig
from semel.coordinator.group.coordinator import GROUP_METADATA_TOPIC_NAME, GroupCoordinator
from semel.coordinator.group.group_manager import RequestInfo

__all__ = ["GROUP_METADATA_TOPIC_NAME", "GroupConfig", "GroupCoordinator", "RequestInfo"]
