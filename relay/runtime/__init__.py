"""The runtime layer: function images and the containers that run handlers.

    recipes        what to build for a function: its dependency and function images (plain data)
    build_context  Dockerfiles and tar build contexts, made in temporary files
    build_limits   a build's wall-clock cutoff and the bounded tail of its output
    images         dependency images and function images on the Docker engine (ImageBuilder)
    pins           which images in-flight invocations are using
    image_gc       removal of old relay-fn-* tags nobody uses any more
    sweep          removal of this host's orphaned execution containers at start, and of leftovers
    containers     what an execution container looks like: hardening, labels, HostConfigs
    context        the RELAY_* variables each invocation sees
    output         handler stdout/stderr, demultiplexed and forwarded line by line
    invocation     what an executor is asked (Invocation) and answers (Outcome)
    protocol       the engine calls of one execution: attach, a wait registered before start
    cold           ColdExecutor: one invocation in one throw-away container
    warm           one warm container and the framed protocol of its resident bootstrap
    warm_pool      WarmExecutor: the warm containers of one worker, reused per function version
    executor       Router: warm invocations to the WarmExecutor, the rest to the ColdExecutor;
                   build_executor makes the pair, sharing one HostConfig per network
    events         RuntimeObserver: builds, warm containers and missing images, for whoever listens

What differs between runtimes (base image, dependency installers,
bootstrap) is data in relay.functions.runtimes, below this layer, so that a
function's checks can ask which files a runtime loads. Importing this
package imports nothing else.
"""
