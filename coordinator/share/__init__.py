"""Share groups (KIP-932): share-partition state, its durable form in
``__share_group_state``, and the manager the ShareFetch/ShareAcknowledge handlers and the
share group membership use.

  partition.py  SharePartition: the pure per-partition state machine
  records.py    ShareSnapshot/ShareUpdate record codecs
  store.py      ShareStateStore: the durable state as replaying the topic gives it
  config.py     group.share.* / share.coordinator.* settings and a group's share.* configs
  manager.py    SharePartitionManager: the async shell (log reads, durable writes, loading)
  service.py    ShareService: share sessions and the core of ShareFetch / ShareAcknowledge v1
"""
