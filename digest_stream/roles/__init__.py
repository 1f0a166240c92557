"""The service's roles: ingest (with the scheduler it drives) and delivery."""
