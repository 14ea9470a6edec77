"""The runtime layer: function images and the containers that run handlers.

    registry       one entry per runtime: base image, dependency installers, bootstrap
    build_context  Dockerfiles and tar build contexts, made in temporary files
    build_limits   a build's wall-clock cutoff and the bounded tail of its output
    images         dependency images and function images on the Docker engine
    pins           which images in-flight invocations are using
    image_gc       removal of old relay-fn-* tags nobody uses any more
    sweep          removal of this host's orphaned execution containers at start
    containers     what an execution container looks like: hardening and labels
    context        the RELAY_* variables each invocation sees
    output         handler stdout/stderr, demultiplexed and forwarded line by line
    executor       one invocation: create, attach, start, wait, clean up

Importing this package imports nothing else; the registry is plain data and
does not need docker-py.
"""
