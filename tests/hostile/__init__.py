"""Hostile-client soak: hostile actors attack a broker subprocess while real clients run an
exactly-once copier and a latency probe; then kill -9, restart, and check that every
acknowledged record is present exactly once and that no invalid batch was stored.

  frames.py    hostile bytes (no I/O): mutated requests of every supported API version,
               raw garbage, lying record batches, compression bombs
  actors.py    the hostile actors (asyncio, their own process), each with counters
  broker.py    the broker subprocess: log to a file, SIGKILL/restart, RSS sampling, log scan
  probe.py     the latency probe (confluent-kafka, acks=all) and the connection canary
  verify.py    the raw read-back: every stored batch of every topic must walk cleanly
  soak.py      profiles and the run (`python -m tests.hostile.soak`, `make hostile`)

README.md in this directory describes how to run it and what it checks.
"""
