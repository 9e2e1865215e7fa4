#!/usr/bin/env bash
# Build a local base image from Debian's packages when no image registry answers.
# Usage: tools/base-image.sh TAG [MIRROR]
# debootstrap (minbase) bookworm with python3 and venv, apt caches cleaned, then
# `docker import`. Its Python is Debian's 3.11; the runtime locks hold cp311 wheels.
set -euo pipefail
tag=${1:?usage: base-image.sh TAG [MIRROR]}
mirror=${2:-http://deb.debian.org/debian}
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "base image $tag exists"; exit 0
fi
root=$(mktemp -d /var/tmp/kit-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  bookworm "$root" "$mirror" >"$root.log" 2>&1 || { tail -n 30 "$root.log" >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/tmp/*
tar -C "$root" --numeric-owner -c . | docker import \
  -c 'ENV LANG=C.UTF-8' -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'CMD ["/usr/bin/python3"]' - "$tag" >/dev/null
rm -f "$root.log"
echo "built base image $tag from Debian bookworm ($mirror)"
