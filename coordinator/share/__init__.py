"""Share groups (KIP-932): share-partition state, its durable form in
``__share_group_state``, and the manager the ShareFetch/ShareAcknowledge handlers and the
share group membership use.

  partition.py  SharePartition: the pure per-partition state machine
  records.py    ShareSnapshot/ShareUpdate record codecs
  store.py      ShareStateStore: the durable state as replaying the topic gives it
  config.py     group.share.* / share.coordinator.* settings and a group's share.* configs
  manager.py    SharePartitionManager: the async shell (log reads, durable writes, loading)
  service.py    ShareService: share sessions and the core of ShareFetch / ShareAcknowledge v1

The broker makes the manager on first use, or at start when the state topic is on disk (its
state is loaded before any request), so a broker without share groups loads none of these
modules at start: the topic's name lives here, where checking for it loads nothing else.
"""

SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"
