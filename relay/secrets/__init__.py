"""Secrets: the local store handlers get their secret environment from."""
