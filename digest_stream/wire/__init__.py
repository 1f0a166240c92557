"""What travels over Kafka: the Avro schemas, their models, the codec, the header envelope and
the digest formats (``formats``: Avro, JSON)."""
