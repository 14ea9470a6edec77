# Relay's container image: relay.pyz on a slim CPython, with git and an SSH
# client for git sync. Build relay.pyz first, then the image:
#
#   python3 build_zipapp.py && docker build -t relay:latest .
#
# The Docker engine is reached through DOCKER_HOST (a socket proxy in
# compose.dev.yaml); never mount the host's Docker socket into Relay.
ARG BASE=python:3.13-slim
FROM ${BASE}

RUN apt-get update \
 && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10000 --home-dir /var/lib/relay --shell /usr/sbin/nologin relay \
 && mkdir -p /var/lib/relay /opt/relay/cache \
 && chown relay:relay /var/lib/relay /opt/relay/cache

COPY --chmod=0755 relay.pyz /usr/local/bin/relay.pyz

USER relay
# Extract relay.pyz once at build time, so every container starts warm.
ENV RELAY_PYZ_CACHE=/opt/relay/cache
RUN relay.pyz --version

VOLUME /var/lib/relay
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 CMD ["relay.pyz", "health"]
CMD ["relay.pyz", "start"]
