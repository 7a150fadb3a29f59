"""Bytes of the Kafka protocol: framing, headers, kio codecs, record batches, error codes and the
API-versions table. Knows nothing of sockets."""
