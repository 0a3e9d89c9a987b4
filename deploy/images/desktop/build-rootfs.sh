#!/bin/sh
# Builds the desktop image's root filesystem without Docker, with mmdebstrap (Debian's package
# `mmdebstrap`; root, network to the Debian mirror and PyPI): the packages of packages.txt, the
# Python packages of python.txt, LibreOffice's defaults (orchard.xcd), the default apps
# (mimeapps.list).
#
#   deploy/images/desktop/build-rootfs.sh OUT          # a directory: --image dir:OUT
#   deploy/images/desktop/build-rootfs.sh OUT.tar      # a tarball: `docker import` / `crane append`
#
# Prints each stage's time.
set -eu
# Hooks write under \$1 by real paths, never through the image's absolute symlinks (which
# would resolve on the build machine: LibreOffice's share/registry is one).
out=${1:?usage: build-rootfs.sh OUT_DIR_OR_TAR}
here=$(cd "$(dirname "$0")" && pwd)
# The build machine's trusted CAs (a TLS-inspecting proxy's included) for pip's downloads only:
# they are removed with the rest of /tmp/orchard, not left in the image.
ca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
packages=$(grep -v '^#' "$here/packages.txt" | paste -sd, -)
started=$(date +%s)
mmdebstrap --variant=apt --include="$packages" \
  --customize-hook="mkdir -p \"\$1/tmp/orchard\" && cp '$here/python.txt' \"\$1/tmp/orchard/\" && cp '$ca' \"\$1/tmp/orchard/build-ca.crt\"" \
  --customize-hook="chroot \"\$1\" env PIP_CERT=/tmp/orchard/build-ca.crt REQUESTS_CA_BUNDLE=/tmp/orchard/build-ca.crt SSL_CERT_FILE=/tmp/orchard/build-ca.crt sh -c 'grep -v \"^#\" /tmp/orchard/python.txt | grep -v \"^desktop-env\" > /tmp/orchard/deps.txt && python3 -m pip install -q --break-system-packages --no-cache-dir --no-compile -r /tmp/orchard/deps.txt && python3 -m pip install -q --break-system-packages --no-cache-dir --no-compile --no-deps \$(grep \"^desktop-env\" /tmp/orchard/python.txt) && rm -rf /tmp/orchard'" \
  --customize-hook="cp '$here/orchard.xcd' \"\$1/etc/libreoffice/registry/orchard.xcd\"" \
  --customize-hook="mkdir -p \"\$1/etc/xdg\" && cp '$here/mimeapps.list' \"\$1/etc/xdg/mimeapps.list\"" \
  --customize-hook="mkdir -p \"\$1/root\" && rm -rf \"\$1/var/lib/apt/lists\"/*" \
  bookworm "$out" http://deb.debian.org/debian
echo "build-rootfs: $out in $(( $(date +%s) - started )) s" >&2
