#!/usr/bin/env bash
# The local RabbitMQ node of the conformance harness: Debian's rabbitmq-server (which `cargo xtask
# brokers install rabbitmq` installs), run as a project-owned node, never the system service:
# its own folder, its own epmd, its own cookie, every port on loopback, given by the caller.
#
# Usage: launcher.sh <work dir> <amqp port> <distribution port> <epmd port> <node name> [kept]
# With `kept` (a test restarting the node between deliveries), the work dir is neither cleared
# at the start nor deleted at the stop: the same node name starts again on its own database.
# Prints `ready 127.0.0.1:<amqp port>` on stdout once the node accepts AMQP (its boot banner's
# "completed with N plugins", printed at any log level: no polling, no extra Erlang VM); the
# node's console output goes to log/console.log in the work dir, its errors also to stderr. Stops the node (gracefully, then with
# SIGKILL to its process group) and deletes the work dir when its stdin closes (the test
# binary's end), on SIGTERM/SIGINT, and, through a watchdog, even if this script is SIGKILLed.
set -euo pipefail
DIR=$1 AMQP=$2 DIST=$3 EPMD=$4 NAME=$5 KEPT=${6:-}
# Not /usr/sbin/rabbitmq-server: that wrapper switches to the rabbitmq user and logs to /var/log.
RMQ=/usr/lib/rabbitmq/bin
if [ ! -x "$RMQ/rabbitmq-server" ]; then
  echo "$RMQ/rabbitmq-server is missing; run \`cargo xtask brokers install rabbitmq\` first" >&2
  exit 1
fi
if [ -z "$KEPT" ]; then rm -rf "$DIR"; fi
forget() { if [ -z "$KEPT" ]; then rm -rf "$DIR"; fi; }
mkdir -p "$DIR"/{mnesia,log,home}
rm -f "$DIR/out"
: > "$DIR/rabbitmq-env.conf"          # keeps /etc/rabbitmq/rabbitmq-env.conf out
cat > "$DIR/rabbitmq.conf" <<CONF
listeners.tcp.default = 127.0.0.1:$AMQP
loopback_users = none
log.console = true
log.console.level = warning
log.file = $DIR/log/rabbit.log
log.file.level = info
CONF
echo '[].' > "$DIR/enabled_plugins"
export HOME="$DIR/home"               # a private .erlang.cookie, shared by the server and CLI tools
export RABBITMQ_CONF_ENV_FILE="$DIR/rabbitmq-env.conf"
export RABBITMQ_NODENAME="$NAME@localhost"
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$AMQP RABBITMQ_DIST_PORT=$DIST
export ERL_EPMD_PORT=$EPMD ERL_EPMD_ADDRESS=127.0.0.1
export RABBITMQ_CONFIG_FILE="$DIR/rabbitmq.conf" RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/enabled_plugins"
export RABBITMQ_MNESIA_BASE="$DIR/mnesia" RABBITMQ_LOG_BASE="$DIR/log" RABBITMQ_PID_FILE="$DIR/rabbit.pid"
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
export RABBITMQ_CTL_DIST_PORT_MIN=$((DIST+1)) RABBITMQ_CTL_DIST_PORT_MAX=$((DIST+10))
# Our own epmd (erl would start a daemon one that outlives the node).
epmd -port "$EPMD" -address 127.0.0.1 & EPMD_PID=$!
mkfifo "$DIR/out"
# Its own process group, so that one kill reaches beam.smp, erl_child_setup and inet_gethost.
setsid "$RMQ/rabbitmq-server" </dev/null >"$DIR/out" 2>&1 & RMQ_PID=$!
cleanup() {
  trap - EXIT INT TERM
  kill -TERM "$RMQ_PID" 2>/dev/null || true       # rabbitmq-server's own TERM trap stops the node gracefully
  for _ in $(seq 100); do kill -0 "$RMQ_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$RMQ_PID" 2>/dev/null || true
  kill -TERM "$EPMD_PID" 2>/dev/null || true
  wait "$RMQ_PID" "$EPMD_PID" 2>/dev/null || true   # not a bare `wait`: the watchdog is a child too
  forget
}
trap cleanup EXIT INT TERM
LPID=$$
setsid bash -c "while kill -0 $LPID 2>/dev/null; do sleep 1; done; kill -KILL -- -$RMQ_PID 2>/dev/null; kill $EPMD_PID 2>/dev/null; [ -n '$KEPT' ] || rm -rf '$DIR'" \
  </dev/null >/dev/null 2>&1 &
# The node's console output to console.log (its errors also to stderr); the ready line to stdout.
while IFS= read -r line; do
  printf '%s\n' "$line" >> "$DIR/log/console.log"
  case $line in
    *" completed with "*" plugins."*) echo "ready 127.0.0.1:$AMQP";;
    *"[error]"*|*"[critical]"*|*"BOOT FAILED"*|*"crash"*) printf 'rabbitmq: %s\n' "$line" >&2;;
  esac
done < "$DIR/out" &
exec 3<&0
# In the background with `wait`, so that a signal's trap runs at once (bash defers traps while a
# foreground command runs).
cat <&3 >/dev/null & wait $! || true
