"""Developer tooling, not the runtime path: the local Kafka and Redis stack (`dev` commands)."""
