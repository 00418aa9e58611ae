"""Reading a window from the deployment's Prometheus: its HTTP API, and the source over it."""
