#!/usr/bin/env bash
# The local rocketmq-rust broker of the conformance harness: the Rust name server and broker
# (crates rocketmq-namesrv and rocketmq-broker, which `cargo xtask brokers install rocketmq --impl
# rocketmq-rust` builds into .brokers/rocketmq/rust/bin), on loopback ports given by the caller.
#
# Usage: launcher.sh <bin dir> <work dir> <name server port> <broker port>
# Prints `rocketmq-rust ready ...` on stdout once the name server routes the broker's TBW102
# template topic (as the Apache launcher does), then runs until its stdin closes (the test
# binary's end) or either server exits, and then stops both and deletes the work dir. The
# servers' own output goes to log files in the work dir; a server that exits early has its last
# lines printed, for the test binary's error.
set -u
bin=$1 work=$2 namesrv_port=$3 broker_port=$4
namesrv=127.0.0.1:$namesrv_port
mkdir -p "$work"
# The servers put logs and stores under the home folder and ROCKETMQ_HOME: both are the run's.
export HOME=$work ROCKETMQ_HOME=$work RUST_LOG=info
unset NAMESRV_ADDR
cat > "$work/broker.toml" <<CONF
# Written by the conformance launcher.
[broker]
namesrvAddr = "$namesrv"
brokerIp1 = "127.0.0.1"
# The HA address it announces to the name server (default 192.0.2.2); nothing here replicates.
brokerIp2 = "127.0.0.1"
listenPort = $broker_port
storePathRootDir = "$work/store"
autoCreateTopicEnable = true
autoCreateSubscriptionGroup = true

[broker.brokerServerConfig]
bindAddress = "127.0.0.1"

[broker.brokerIdentity]
brokerName = "conformance-broker"
brokerClusterName = "ConformanceCluster"
brokerId = 0

[store]
storePathRootDir = "$work/store"
storePathCommitLog = "$work/store/commitlog"
haListenAddress = "127.0.0.1"
haListenPort = $((broker_port + 1))
CONF

"$bin/rocketmq-namesrv-rust" --listenPort "$namesrv_port" --bindAddress 127.0.0.1 --rocketmqHome "$work" \
    --kvConfigPath "$work/kvConfig.json" > "$work/namesrv.log" 2>&1 &
namesrv_pid=$!
"$bin/rocketmq-broker-rust" -c "$work/broker.toml" > "$work/broker.log" 2>&1 &
broker_pid=$!

# SIGKILL, not SIGTERM: the broker's orderly shutdown is not dependable here (an earlier probe
# saw it keep serving after SIGTERM; an idle one measured here took 4 s to stop after it), it
# only flushes a store that is deleted the next moment, and the test binary that ends must not
# wait for it. The name server goes the same way.
stop() {
    kill -KILL "$namesrv_pid" "$broker_pid" 2>/dev/null
    wait "$namesrv_pid" "$broker_pid" 2>/dev/null
    rm -rf "$work"
}

# The last lines of a server that ended on its own, on stdout, where the test binary keeps them.
report() {
    for server in namesrv broker; do
        # Without the colours of their console log.
        tail -n 8 "$work/$server.log" | sed -e 's/\x1b\[[0-9;]*m//g' -e "s/^/rocketmq-rust $server: /"
    done
}

# Ready: the name server has the broker's TBW102 route, through which clients create topics.
for ((attempt = 0; ; attempt++)); do
    if grep -q 'new topic registered, TBW102' "$work/namesrv.log" 2>/dev/null; then
        break
    fi
    if ! kill -0 "$namesrv_pid" 2>/dev/null || ! kill -0 "$broker_pid" 2>/dev/null || ((attempt == 600)); then
        echo "rocketmq-rust did not become ready (a server exited, or 60 s passed)"
        report
        stop
        exit 1
    fi
    sleep 0.1
done
echo "rocketmq-rust ready namesrv=$namesrv broker=127.0.0.1:$broker_port"

# A background job reads /dev/null unless told otherwise: give it the launcher's stdin.
exec 3<&0
cat <&3 > /dev/null &
stdin_pid=$!
wait -n "$stdin_pid" "$namesrv_pid" "$broker_pid"
status=$?
if kill -0 "$stdin_pid" 2>/dev/null; then
    echo "rocketmq-rust: a server exited (status $status) while the test binary ran"
    report
    kill "$stdin_pid" 2>/dev/null
    stop
    exit 1
fi
stop
