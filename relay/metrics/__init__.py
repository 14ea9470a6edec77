"""Metrics: the Prometheus registry and the endpoint that serves it."""
