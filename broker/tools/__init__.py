"""``semel <tool>``: command line tools that speak the Kafka protocol to any Kafka-compatible
broker (``--bootstrap-server``), and ``dump-log``, which reads a data directory's files."""
