"""The run ledger: one record per attempt, fleet-wide, in a capped Redis stream.

    record   Run and its fields: what a record holds, how it is written and read back
    ledger   RunLedger: an observer of the engine that writes the records with the settle
    reader   Runs: the ledger read back by ``relay runs`` and ``relay function inspect``
    report   what those commands print of its records
    replay   sending a time range of the source stream through named functions again

The ledger is ``relay:<REDIS_STREAM>:runs`` (relay.stream.keys.runs_stream),
bounded by RUNS_MAX_AGE and RUNS_MAX_ENTRIES. Only ``ledger`` runs in the
worker; the rest is for the admin commands and imports neither gevent nor Docker.
"""
