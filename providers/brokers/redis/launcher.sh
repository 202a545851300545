#!/usr/bin/env bash
# The local Redis of the conformance harness: Debian's redis-server (`cargo xtask brokers install
# redis`), never the package's service, on a loopback port given by the caller, with no
# persistence (no RDB snapshot, no append-only file) and a work dir of its own.
#
# Usage: launcher.sh <redis-server> <work dir> <port> [kept]
# With `kept` (a test restarting the server between deliveries), the server persists to an
# append-only file in the work dir, written and fsynced before each reply (`appendfsync
# always`), and the work dir is left in place when it stops, for the next start to load. Not
# Redis's default `everysec`: while a background fsync is in progress it postpones the write for
# up to 2 s and replies anyway, so a crash loses writes the clients saw succeed (in CI, under
# load, the message's last requeue was gone after a SIGKILL and restart).
# Prints `redis ready ...` on stdout once the server logs "Ready to accept connections" (its log
# lines start with its pid, so local::start cannot wait on them directly), then runs until its
# stdin closes (the test binary's end) or the server exits, and then stops the server and deletes
# the work dir. A server that exits early has its last log lines printed, for the binary's error.
set -u
server=$1 work=$2 port=$3 kept=${4:-}
mkdir -p "$work"
# Readiness is read from this start's log alone (a kept work dir holds the last start's).
: > "$work/redis.log"
persistence=(--appendonly no)
[ -z "$kept" ] || persistence=(--appendonly yes --appendfsync always)
"$server" --bind 127.0.0.1 --port "$port" --dir "$work" --save "" "${persistence[@]}" \
    --daemonize no --logfile "$work/redis.log" --protected-mode yes > /dev/null 2>&1 &
server_pid=$!

# SIGKILL: nothing is persisted (or, kept, the append-only file has every reply's write), and the
# ending test binary must not wait for a shutdown.
stop() {
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    [ -n "$kept" ] || rm -rf "$work"
}

report() {
    tail -n 8 "$work/redis.log" 2>/dev/null | sed -e 's/^/redis-server: /'
}

for ((attempt = 0; ; attempt++)); do
    if grep -q 'Ready to accept connections' "$work/redis.log" 2>/dev/null; then
        break
    fi
    if ! kill -0 "$server_pid" 2>/dev/null || ((attempt == 300)); then
        echo "redis did not become ready (the server exited, or 30 s passed)"
        report
        stop
        exit 1
    fi
    sleep 0.05
done
echo "redis ready 127.0.0.1:$port"

# A background job reads /dev/null unless told otherwise: give it the launcher's stdin.
exec 3<&0
cat <&3 > /dev/null &
stdin_pid=$!
wait -n "$stdin_pid" "$server_pid"
status=$?
if kill -0 "$stdin_pid" 2>/dev/null; then
    echo "redis: the server exited (status $status) while the test binary ran"
    report
    kill "$stdin_pid" 2>/dev/null
    stop
    exit 1
fi
stop
