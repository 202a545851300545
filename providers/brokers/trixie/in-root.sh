#!/usr/bin/env bash
# Runs a command inside a root file system (the Debian 13 root the newer broker versions run in,
# `--impl rabbitmq-4.0.5` and `--impl redis-8.0.2`, under .brokers/trixie), with a /proc of its
# own mounted in a private mount namespace: RabbitMQ and apt read /proc, and the mount goes away
# with the command, whatever ends it.
# Usage: in-root.sh <root> <command> [arguments...]   (needs root, as chroot does)
set -euo pipefail
ROOT=$1
shift
exec unshare --mount --propagation private bash -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$ROOT" "$@"
