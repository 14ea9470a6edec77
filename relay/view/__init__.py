"""The local state view: a SQLite file the admin commands read while Relay or Redis is down.

    records      the rows as dataclasses: what the writer stores and the reports read
    database     the file (DB_PATH), its schema, and StateDatabase, the writer's connection
    reader       StateReader: read-only, for ``relay function`` and ``relay stats``
    writer       StateWriter: keeps the file in step with Relay, off the hot path (gevent)
    report       the text ``relay function`` and ``relay stats`` print
    json_report  their ``--json`` forms

Only the writer imports gevent; the rest imports the standard library and Relay's leaves, so the
admin commands that read the file start fast.
"""
