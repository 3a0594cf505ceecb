# mrtr-gateway container image.
#
#   docker build -t mrtr-gateway .          (podman: podman build --format docker -t mrtr-gateway .)
#   docker run --rm --read-only --tmpfs /tmp -p 127.0.0.1:8080:8080 -p 127.0.0.1:9090:9090 mrtr-gateway
#
# tests/image/container.sh builds it and runs it this way; tests/image/fleet.sh runs three of it
# with the Helm chart's configuration.
#
# Ports:
#   8080  MCP endpoint (server.listen)
#   9090  admin listener (server.admin_listen): /healthz, /readyz, /metrics, /status
#
# The image runs as uid/gid 10001 and writes nothing outside /tmp, so it runs with a read-only
# root filesystem (give it a tmpfs or emptyDir at /tmp for stdio backends that need scratch space).
# The configuration baked in at /etc/mrtr-gateway/config.toml serves the built-in demo backend
# without authentication; mount a real configuration over it (the Helm chart does).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# ---- build ------------------------------------------------------------------------------------
FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
ENV CARGO_BUILD_JOBS=2 \
    CARGO_TERM_COLOR=never
WORKDIR /src
# Dependencies first, in a layer of their own that survives edits to src/: the manifest names
# the bench and example targets, so their sources come along (cargo refuses a manifest whose
# targets are missing), and a stub main stands in for the gateway's sources.
COPY Cargo.toml Cargo.lock ./
COPY benches ./benches
COPY tests/fixtures ./tests/fixtures
RUN mkdir src \
 && echo 'fn main() {}' > src/main.rs \
 && cargo build --release --locked --features otlp \
 && cargo clean --release --package mrtr-gateway \
 && rm -rf src
COPY src ./src
RUN cargo build --release --locked --features otlp \
 && install -D -m 0755 target/release/mrtr-gateway /out/mrtr-gateway
# The image's default configuration, checked by the binary it ships with.
RUN printf '%s\n' \
      '# Default configuration of the image: the built-in demo backend behind /mcp, no' \
      '# authentication. Mount a real configuration at /etc/mrtr-gateway for a deployment.' \
      '[server]' \
      'listen = "0.0.0.0:8080"' \
      'admin_listen = "0.0.0.0:9090"' \
      'allow_unauthenticated = true' \
      '' \
      '[[route]]' \
      'path = "/mcp"' \
      'backend = "demo"' \
      '' \
      '[backend.demo]' \
      'transport = "stdio"' \
      'command = "/usr/local/bin/mrtr-gateway"' \
      'args = ["demo-backend"]' \
      > /out/config.toml \
 && /out/mrtr-gateway check-config /out/config.toml

# ---- runtime ----------------------------------------------------------------------------------
FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# ca-certificates: the system trust store, which the gateway reads besides its own webpki roots
# (mount a private CA and point SSL_CERT_FILE at it), and which stdio backends use for their TLS
# calls; it follows the base image's release, so it is not pinned. `apt-get clean` leaves no
# package cache behind on a base without the official images' docker-clean setting.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log \
 && groupadd --system --gid 10001 mrtr \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin mrtr
COPY --from=builder /out/mrtr-gateway /usr/local/bin/mrtr-gateway
COPY --from=builder /out/config.toml /etc/mrtr-gateway/config.toml
# Children (stdio backends) inherit HOME and TMPDIR: point both at the writable /tmp.
ENV HOME=/tmp \
    TMPDIR=/tmp \
    MRTR_GATEWAY_LOG_FORMAT=json \
    MRTR_HEALTH_PORT=9090
USER 10001:10001
EXPOSE 8080 9090
# The image has no curl or wget; bash's /dev/tcp sends a plain HTTP/1.0 request to the admin
# listener. Set MRTR_HEALTH_PORT when admin_listen uses another port. Kubernetes ignores
# HEALTHCHECK and uses the chart's httpGet probes instead.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${MRTR_HEALTH_PORT:-9090} && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/local/bin/mrtr-gateway"]
CMD ["--config", "/etc/mrtr-gateway/config.toml"]

# ---- example: adding a Node-based legacy backend ----------------------------------------------
# To serve an npm MCP server (here the reference filesystem server) behind the gateway, extend
# the image: install the package at build time and run it with node directly. `npx -y` would
# download the package at run time, which needs network access and a writable home directory.
#
#   FROM node:22-bookworm-slim AS node-backend
#   RUN npm install --global --omit=dev @modelcontextprotocol/server-filesystem@2026.8.31 \
#    && npm cache clean --force
#
#   FROM runtime AS runtime-with-node
#   COPY --from=node-backend /usr/local/bin/node /usr/local/bin/node
#   COPY --from=node-backend /usr/local/lib/node_modules /usr/local/lib/node_modules
#
# Build it with `docker build --target runtime-with-node -t mrtr-gateway:node .` and point a stdio
# backend at it:
#
#   [backend.files]
#   transport = "stdio"
#   command = "/usr/local/bin/node"
#   args = ["/usr/local/lib/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "/srv/data"]
#
# Each backend session is one node process (about 75 MB resident for this server): size the
# container's memory for pool.max_sessions of them (see docs/operations.md).
