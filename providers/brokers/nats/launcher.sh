#!/usr/bin/env bash
# The local NATS of the conformance harness: nats-server with JetStream (`cargo xtask brokers
# install nats`), on a loopback port given by the caller, its store in a work dir of its own.
#
# Usage: launcher.sh <nats-server> <work dir> <port> [kept]
# With `kept` (a test restarting the server between deliveries) the work dir, and the store in
# it, is left in place when the server stops, for the next start to load.
# Prints `nats ready ...` on stdout once the server logs "Server is ready", then runs until its
# stdin closes (the test binary's end) or the server exits, and then stops the server and deletes
# the work dir. A server that exits early has its last log lines printed, for the binary's error.
set -u
server=$1 work=$2 port=$3 kept=${4:-}
mkdir -p "$work"
: > "$work/nats.log"
"$server" --addr 127.0.0.1 --port "$port" --jetstream --store_dir "$work/store" \
    --log "$work/nats.log" > /dev/null 2>&1 &
server_pid=$!

# SIGTERM: nats-server flushes its store and stops in well under a second.
stop() {
    kill -TERM "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    [ -n "$kept" ] || rm -rf "$work"
}

report() {
    tail -n 8 "$work/nats.log" 2>/dev/null | sed -e 's/^/nats-server: /'
}

for ((attempt = 0; ; attempt++)); do
    if grep -q 'Server is ready' "$work/nats.log" 2>/dev/null; then
        break
    fi
    if ! kill -0 "$server_pid" 2>/dev/null || ((attempt == 300)); then
        echo "nats did not become ready (the server exited, or 30 s passed)"
        report
        stop
        exit 1
    fi
    sleep 0.05
done
echo "nats ready 127.0.0.1:$port"

# A background job reads /dev/null unless told otherwise: give it the launcher's stdin.
exec 3<&0
cat <&3 > /dev/null &
stdin_pid=$!
wait -n "$stdin_pid" "$server_pid"
status=$?
if kill -0 "$stdin_pid" 2>/dev/null; then
    echo "nats: the server exited (status $status) while the test binary ran"
    report
    kill "$stdin_pid" 2>/dev/null
    stop
    exit 1
fi
stop
