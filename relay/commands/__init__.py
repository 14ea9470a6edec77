"""Administrative commands: each module has ``run(args)``, called by relay.cli through its table.

None of them imports gevent; each imports what it needs when it runs.
"""
