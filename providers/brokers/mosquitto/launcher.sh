#!/usr/bin/env bash
# The local MQTT broker of the conformance harness: Debian's mosquitto (/usr/sbin/mosquitto,
# `cargo xtask brokers install mqtt`) with a generated configuration, on a loopback port given by
# the caller, never the system service.
#
# Usage: launcher.sh <mosquitto binary> <port> [<store folder>]
# With a store folder, mosquitto persists its sessions and queued messages there (written when it
# stops) and reads them back when it starts on the same folder: a broker a test restarts.
# Writes the configuration in a temporary folder of its own, starts mosquitto, and prints
# `mosquitto ready ...` on stdout once the port accepts connections (mosquitto's own lines,
# "Opening ipv4 listen socket on port ..." and "mosquitto version ... running", come just before).
# Then runs until its stdin closes (the test binary's end) or mosquitto exits, stops mosquitto
# and deletes the folder. mosquitto logs to stdout only (errors, warnings, notices: no
# per-message lines), where the test binary keeps the last lines for an error.
set -u
mosquitto=$1 port=$2 store=${3:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/conformance-mosquitto.XXXXXX") || exit 1
if [[ -n $store ]]; then
    mkdir -p "$store" || exit 1
    # Run as root, mosquitto drops to its own user, which cannot write the caller's folder.
    persistence="persistence true
persistence_location $store/
user $(id -un)"
else
    persistence="persistence false"
fi
cat > "$work/mosquitto.conf" <<CONF
# Written by the conformance launcher.
listener $port 127.0.0.1
allow_anonymous true
$persistence
# Sessions of every cell's subscriptions queue here between receives.
max_queued_messages 100000
max_inflight_messages 100
log_dest stdout
log_type error
log_type warning
log_type notice
log_timestamp false
CONF

"$mosquitto" -c "$work/mosquitto.conf" &
broker_pid=$!
# A launcher killed outright (SIGKILL: the kill-broker fault) cannot stop mosquitto itself: a
# watchdog does, and deletes the folder.
launcher_pid=$$
(
    while kill -0 "$launcher_pid" 2>/dev/null; do sleep 1; done
    kill "$broker_pid" 2>/dev/null
    rm -rf "$work"
) < /dev/null > /dev/null 2>&1 &

stop() {
    kill "$broker_pid" 2>/dev/null
    wait "$broker_pid" 2>/dev/null
    rm -rf "$work"
}

for ((attempt = 0; ; attempt++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        break
    fi
    if ! kill -0 "$broker_pid" 2>/dev/null || ((attempt == 300)); then
        echo "mosquitto did not become ready (it exited, or 30 s passed)"
        stop
        exit 1
    fi
    sleep 0.1
done
echo "mosquitto ready on 127.0.0.1:$port"

# A background job reads /dev/null unless told otherwise: give it the launcher's stdin.
exec 4<&0
cat <&4 > /dev/null &
stdin_pid=$!
wait -n "$stdin_pid" "$broker_pid"
status=$?
if kill -0 "$stdin_pid" 2>/dev/null; then
    echo "mosquitto exited (status $status) while the test binary ran"
    kill "$stdin_pid" 2>/dev/null
    stop
    exit 1
fi
stop
