"""The live function set: what /functions holds becomes what Relay serves.

The watcher notices changes, the reconciler loads and builds one function at
a time, and the catalog holds the immutable snapshot the consumer matches
against.
"""
