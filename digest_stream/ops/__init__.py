"""Running the service: metrics, health, the HTTP server, logs, hooks, admin and config views."""
