"""Crash/chaos verification suite: workloads with real clients against a broker subprocess
under faults, recorded as histories and judged by a checker.

  history.py        the history format (JSON lines) and its recorder
  checker.py        the anomaly checker over a history and a final full read of every topic
  final_read.py     the final read: raw wire (every batch, markers) and read_committed client
  faulty_broker.py  test-only broker entry point with the fault-injecting file system and a
                    loopback control socket (disk faults, power loss, kill at PREPARE)
  target.py         the broker under test behind the proxy: kill, pause, restart, faults
  proxy.py          asyncio TCP proxy (loopback): delay, blackhole, reset, slow one connection
  nemesis.py        the seeded fault schedule
  workloads/        transactional copier (confluent-kafka; Java in tests/java/SemelClient.java),
                    idempotent producers, Jepsen-style queue
  runner.py         `python -m tests.chaos.runner --profile ci|long` (also `make chaos`)

README.md in this directory describes how to run it and what each anomaly means.
"""
