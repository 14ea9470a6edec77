"""Relay: an event-driven function runner on Redis Streams and Docker."""

__version__ = "0.1.0"
