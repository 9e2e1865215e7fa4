#!/usr/bin/env bash
# Host packages for the docker backend and the image build (Debian, as root):
# docker.io (engine, containerd, runc) and debootstrap (the registry-less base image);
# chromium, which renders the claims page headless in tests/test_claims_page.py.
# Installing docker.io must not try to start a service (there is no systemd here), so a
# temporary policy-rc.d refuses service starts while apt runs.
set -euo pipefail
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && { echo "host packages present"; exit 0; }
policy=/usr/sbin/policy-rc.d
printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"
trap 'rm -f "$policy"' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "installed ${need[*]}"
