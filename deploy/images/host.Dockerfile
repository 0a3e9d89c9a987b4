# The host image: `orchard` (API server, plugin runtime, kubernetes backend) with the plugins
# the build ships. Built from the repository root:
#
#   docker build -f deploy/images/host.Dockerfile -t ghcr.io/orchard-env/orchard:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# The Python and JavaScript graders need componentize-py (PyPI) and componentize-js (npm).
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip nodejs npm \
 && python3 -m pip install --break-system-packages componentize-py==0.25.1
RUN rustup target add wasm32-wasip2 x86_64-unknown-linux-musl \
 && cargo xtask agent \
 && (cd graders/keywords-js && npm ci --no-audit --no-fund) \
 && cargo xtask plugins \
 && cargo build --release -p orchard-cli

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home orchard
COPY --from=build /src/target/release/orchard /usr/local/bin/orchard
COPY --from=build /src/target/plugins /usr/local/lib/orchard/plugins
COPY --from=build /src/target/x86_64-unknown-linux-musl/agent/orchard-agent /usr/local/lib/orchard/orchard-agent
COPY --from=build /src/examples /usr/local/share/orchard/examples
ENV ORCHARD_PLUGIN_DIR=/usr/local/lib/orchard/plugins \
    ORCHARD_AGENT_BIN=/usr/local/lib/orchard/orchard-agent
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/orchard"]
CMD ["serve", "--listen=0.0.0.0:8000", "--backend=kubernetes"]
