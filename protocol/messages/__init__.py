"""Generated Kafka message codecs (``python -m semel.protocol.codegen``). Do not edit."""
