#!/usr/bin/env bash
# A Docker engine for the container broker source, on machines that have none running.
#
#   docker-engine.sh up DIR      install docker.io if `docker` is missing (apt-get), start dockerd
#                                if no daemon answers (pid in DIR/dockerd.pid, log in DIR/dockerd.log),
#                                and wait for it. Exit 0 when a daemon answers; else print ONE line
#                                saying why and exit 3, so callers can tell "no engine" from failures.
#   docker-engine.sh down DIR    stop the dockerd `up` started (only that pid), if any.
#   docker-engine.sh leftovers   fail, listing them, when containers labelled by testcontainers remain.
#
# dockerd runs without iptables and with the vfs storage driver: that is what starts on a machine
# (or container) without kernel NAT rules or overlayfs, and port mapping still works through
# docker-proxy. Images cannot be pulled here; `cargo xtask brokers images` builds what is needed.
set -euo pipefail

label=org.testcontainers.managed-by=testcontainers

answers() { docker info >/dev/null 2>&1; }

up() {
  local dir=$1
  mkdir -p "$dir"
  if ! command -v docker >/dev/null || ! command -v dockerd >/dev/null; then
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io; } >"$dir/docker-install.log" 2>&1; then
      echo "no Docker engine: apt-get install docker.io failed (see $dir/docker-install.log)"
      exit 3
    fi
  fi
  if answers; then
    return 0
  fi
  dockerd --iptables=false --ip6tables=false --storage-driver=vfs >"$dir/dockerd.log" 2>&1 &
  echo $! >"$dir/dockerd.pid"
  for _ in $(seq 1 60); do
    if answers; then
      return 0
    fi
    if ! kill -0 "$(cat "$dir/dockerd.pid")" 2>/dev/null; then
      echo "no Docker engine: dockerd exited at start: $(tail -n 1 "$dir/dockerd.log")"
      rm -f "$dir/dockerd.pid"
      exit 3
    fi
    sleep 0.5
  done
  echo "no Docker engine: dockerd did not answer within 30 s (see $dir/dockerd.log)"
  down "$dir"
  exit 3
}

down() {
  local dir=$1 pid
  [[ -f "$dir/dockerd.pid" ]] || return 0
  pid=$(cat "$dir/dockerd.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  rm -f "$dir/dockerd.pid"
}

leftovers() {
  local left
  left=$(docker ps -a --filter "label=$label" --format '{{.ID}} {{.Image}} {{.Status}}')
  if [[ -n "$left" ]]; then
    echo "containers left behind (label $label):"
    echo "$left"
    exit 1
  fi
}

case "${1:-}" in
  up) up "${2:?usage: docker-engine.sh up DIR}" ;;
  down) down "${2:?usage: docker-engine.sh down DIR}" ;;
  leftovers) leftovers ;;
  *) echo "usage: docker-engine.sh up DIR | down DIR | leftovers" >&2; exit 2 ;;
esac
