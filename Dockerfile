# Relay's container image: relay.pyz on a slim CPython, with git and an SSH
# client for git sync. Build relay.pyz first, then the image:
#
#   python3 build_zipapp.py && docker build -t relay:latest .
#
# BASE may be any Debian-based image with CPython 3.11, 3.12 or 3.13. git, ssh
# and the CA bundle are installed with apt only when the base lacks them, so a
# base that has them builds without a network.
#
# Relay builds images and runs containers, so it needs the Docker engine, and
# that is root on the engine's host however it is reached. Two ways:
#  - a socket proxy that forwards only the Engine API endpoints Relay uses,
#    with DOCKER_HOST pointed at it (compose.dev.yaml): the socket stays out of
#    Relay's container and the rest of the API is closed;
#  - the host's socket mounted in, with its group added, since Relay runs as
#    the unprivileged user relay:
#      docker run --stop-timeout 400 -v /var/run/docker.sock:/var/run/docker.sock \
#        --group-add "$(stat -c %g /var/run/docker.sock)" ...
#
# Give every container of this image --stop-timeout 400 (compose:
# stop_grace_period: 400s), as the systemd unit gives TimeoutStopSec=400s:
# after SIGTERM Relay lets running invocations finish, each within its rule's
# timeout (at most 5m) plus a 30s margin, then removes its warm containers and
# flushes its state. Docker's default of 10s kills invocations mid-way.
ARG BASE=python:3.13-slim
FROM ${BASE}

RUN if ! command -v git >/dev/null || ! command -v ssh >/dev/null || [ ! -s /etc/ssl/certs/ca-certificates.crt ]; then \
        apt-get update \
     && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
     && rm -rf /var/lib/apt/lists/*; \
    fi \
 && useradd --system --uid 10000 --home-dir /var/lib/relay --shell /usr/sbin/nologin relay \
 && mkdir -p /var/lib/relay /opt/relay/cache \
 && chown relay:relay /var/lib/relay /opt/relay/cache

# relay.pyz keeps the mode it has in the build context (build_zipapp.py writes
# it 0755). COPY --chmod would need BuildKit, which not every engine uses.
COPY relay.pyz /usr/local/bin/relay.pyz

USER relay
# Extract relay.pyz once at build time, so every container starts warm.
ENV RELAY_PYZ_CACHE=/opt/relay/cache
RUN relay.pyz --version

VOLUME /var/lib/relay
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 CMD ["relay.pyz", "health"]
CMD ["relay.pyz", "start"]
