"""Git sync: /functions materialized from an SSH git repository.

    layout          the fixed paths under /var/lib/relay (ssh/, git/)
    keys            the ed25519 deploy key (relay git keygen)
    source          the SSH URL, ref and path of the source, persisted (relay git set)
    known_hosts     Relay's own host-key pins, trusted on first use
    checkout        the managed clone: fetch, resolve the ref, detached hard reset
    materialize     the checkout's functions copied into /functions, exactly
    history         the checked-out commit and the last sync, read without git
    sync            one ``relay git sync``, start to end, under a lock
    webhook_secret  the webhook's secret: its name in the source, the store that knows it
    delivery        what a GitHub delivery asks for: signature, repository, ref
    sync_process    the webhook's sync: ``relay git sync`` as a child process
    webhook         POST /github on GIT_WEBHOOK_ADDR; a burst of pushes coalesced (relay.coalesce)

The ``relay git`` command line is relay/commands/git.py; the exceptions are
in relay.errors, the atomic writes in relay.files. Nothing here runs on its
own: only ``relay git sync`` or an accepted webhook delivery changes
/functions. keygen, set, status and remove import nothing heavier than the
standard library (keygen adds ``cryptography``).
"""
