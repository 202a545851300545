#!/usr/bin/env bash
# The local PostgreSQL of the conformance harness: a cluster of the project's own, made with
# initdb in a fresh temporary folder and served by `postgres` on a loopback port given by the
# caller. Never the system's service.
#
# Usage: launcher.sh <bin dir> <port> <user> [<kept folder>]
# With a kept folder (a test restarting the server between deliveries), the cluster lives there:
# made by initdb only when the folder has none yet, and left in place when the server stops; and
# a commit returns once its write-ahead log is written (synchronous_commit on, PostgreSQL's
# default), so a server that stops as a crash loses no commit (measured: with it off, the last
# requeue before the crash was lost and the row stayed leased).
# The script becomes the server (exec), so the process the test binary started is the server
# itself: killing it kills the server. Its log (warnings and worse) goes to stdout, where the
# test binary keeps the last lines. Beside it, one helper prints `postgres ready <url>` on stdout
# once the server accepts connections, another waits for stdin to close (the test binary's
# end), then stops the server and deletes the folder. The cluster trusts the fixed <user>.
#
# PostgreSQL refuses to run as root. Run as root (as every machine of this project is), initdb
# and the server run as the unprivileged system user `postgres`, which the Debian package
# creates (`cargo xtask brokers install postgres` makes sure it exists), owner of the folder.
set -u
bin=$1 port=$2 user=$3 kept=${4:-}
if [ -n "$kept" ]; then
    work=$kept
    mkdir -p "$work"
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/conformance-postgres.XXXXXX")
fi
forget() { [ -n "$kept" ] || rm -rf "$work"; }
as_server=()
if [ "$(id -u)" = 0 ]; then
    chown postgres: "$work"
    as_server=(setpriv --reuid=postgres --regid=postgres --init-groups --reset-env --)
fi

if [ -d "$work/data" ]; then
    : # a kept cluster, started again
elif ! "${as_server[@]}" "$bin/initdb" -D "$work/data" -U "$user" --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync \
    > "$work/initdb.log" 2>&1; then
    echo "postgres: initdb failed:"
    tail -n 20 "$work/initdb.log" | sed 's/^/postgres initdb: /'
    forget
    exit 1
fi

server=$$
# Ready: the server accepts connections (30 s at most; the binary's own ceiling reports it).
(
    for ((attempt = 0; attempt < 300; attempt++)); do
        if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U "$user" -d postgres; then
            echo "postgres ready postgres://$user@127.0.0.1:$port/postgres"
            exit 0
        fi
        sleep 0.1
    done
) < /dev/null &
# The end: stdin closes (a background job reads /dev/null unless given the script's stdin).
# Immediate shutdown (SIGQUIT): nothing to flush in a cluster deleted the next moment; a kept
# one recovers from its write-ahead log on its next start, as after a crash.
exec 3<&0
(
    cat <&3 > /dev/null
    kill -QUIT "$server" 2>/dev/null
    while kill -0 "$server" 2>/dev/null; do sleep 0.05; done
    forget
) > /dev/null 2>&1 &
exec 3<&-

# fsync and its kin off: the cluster lives as long as one test binary, and the machine's page
# cache outlives any crash of the server.
synchronous_commit=off
[ -z "$kept" ] || synchronous_commit=on
exec "${as_server[@]}" "$bin/postgres" -D "$work/data" -p "$port" -k "$work" \
    -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=$synchronous_commit -c full_page_writes=off \
    -c max_connections=500 -c shared_buffers=64MB -c log_min_messages=warning 2>&1 < /dev/null
