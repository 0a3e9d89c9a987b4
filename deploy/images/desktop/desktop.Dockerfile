# The desktop image: a Debian desktop's apps for `[environment.desktop]` tasks and OSWorld-format
# tasks (`orchard convert osworld`). Orchard's agent and desktop service are not in it: they are
# carried into each sandbox. Built from the repository root:
#
#   docker build -f deploy/images/desktop/desktop.Dockerfile -t REGISTRY/orchard-desktop:bookworm .
#
# Without Docker, deploy/images/desktop/build-rootfs.sh makes the same root filesystem with
# mmdebstrap (`orchard eval ... --image dir:PATH` runs it locally).
FROM debian:bookworm-slim
COPY deploy/images/desktop/packages.txt deploy/images/desktop/python.txt /tmp/orchard/
RUN apt-get update \
 && grep -v '^#' /tmp/orchard/packages.txt | xargs apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/*
RUN grep -v '^#' /tmp/orchard/python.txt | grep -v '^desktop-env' > /tmp/orchard/deps.txt \
 && python3 -m pip install --break-system-packages --no-cache-dir --no-compile -r /tmp/orchard/deps.txt \
 && python3 -m pip install --break-system-packages --no-cache-dir --no-compile --no-deps \
      "$(grep '^desktop-env' /tmp/orchard/python.txt)" \
 && rm -rf /tmp/orchard
# share/registry is a link to /etc/libreoffice/registry: the file goes where the link points.
COPY deploy/images/desktop/orchard.xcd /etc/libreoffice/registry/orchard.xcd
COPY deploy/images/desktop/mimeapps.list /etc/xdg/mimeapps.list
WORKDIR /root
