#!/usr/bin/env bash
# Start or stop a private Docker engine for the kit's docker backend and tests.
# Usage: tools/dockerd.sh start|stop [STATE_DIR]
# Prints the DOCKER_HOST to export after "start". Needs root and Debian's docker.io
# (tools/install-host.sh installs it). No systemd is assumed: dockerd runs by hand,
# without a bridge or iptables, so containers only ever have loopback.
set -euo pipefail
cmd=${1:?usage: dockerd.sh start|stop [STATE_DIR]}
state=${2:-/var/tmp/kit-dockerd}
sock="$state/docker.sock"
pidfile="$state/dockerd.pid"

case "$cmd" in
start)
  mkdir -p "$state/data" "$state/exec"
  if [ -S "$sock" ] && DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1; then
    echo "unix://$sock"; exit 0
  fi
  # containerd is started by dockerd itself when none is running.
  nohup dockerd --data-root "$state/data" --exec-root "$state/exec" \
    -H "unix://$sock" --pidfile "$pidfile" --storage-driver=overlay2 \
    --iptables=false --ip6tables=false --bridge=none --ip-masq=false \
    >"$state/dockerd.log" 2>&1 &
  for _ in $(seq 1 60); do
    if DOCKER_HOST="unix://$sock" docker info >/dev/null 2>&1; then
      echo "unix://$sock"; exit 0
    fi
    sleep 0.5
  done
  echo "dockerd did not answer on $sock within 30 s; log: $state/dockerd.log" >&2
  tail -n 20 "$state/dockerd.log" >&2 || true
  exit 1
  ;;
stop)
  if [ -f "$pidfile" ]; then
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  # A stopped dockerd can leave nsfs and overlay mounts under its folders.
  grep -F "$state/" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  ;;
*) echo "usage: dockerd.sh start|stop [STATE_DIR]" >&2; exit 2 ;;
esac
