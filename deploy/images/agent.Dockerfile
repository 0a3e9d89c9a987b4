# The agent image: the static orchard-agent (and the assistant domain's mock services). Sandbox pods run it as an init
# container (`/orchard-agent --install PATH`) that copies the agent into an emptyDir, from which
# the user's own image runs it — so any image works without a rebuild.
#
#   cargo xtask agent        # builds target/x86_64-unknown-linux-musl/agent/orchard-agent
#   docker build -f deploy/images/agent.Dockerfile -t ghcr.io/orchard-env/orchard-agent:0.1.0 .
FROM scratch
COPY target/x86_64-unknown-linux-musl/agent/orchard-agent /orchard-agent
# Installed beside the agent: assistant tasks start it as their entrypoint.
COPY target/x86_64-unknown-linux-musl/agent/orchard-mock-services /orchard-mock-services
USER 65534:65534
ENTRYPOINT ["/orchard-agent"]
