"""The chaos workloads: transactional copier (copier.py), idempotent producers
(idempotent.py), Jepsen-style queue (queue.py); client settings in common.py."""
