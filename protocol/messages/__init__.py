"""Generated Kafka message codecs (``python -m protocol.codegen``). Do not edit."""
