"""The local state view: a SQLite file the admin commands read while Relay or Redis is down.

The writer keeps it in step with Relay off the hot path; report renders it.
"""
