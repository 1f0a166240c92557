"""What travels over Kafka: the Avro schemas, their models, the codec and the header envelope."""
