#!/usr/bin/env bash
# /etc/kafka/docker/run of the Kafka stand-in image `cargo xtask brokers images` builds: the path
# the apache/kafka image starts its broker from, and where testcontainers-modules' apache::Kafka
# expects it (its start script exports the advertised listeners, with the host-mapped port, then
# runs this). The node is the project's KafkaLauncher on the pinned jars, configured from the
# environment as that image is (CLUSTER_ID and the KAFKA_* variables; see KafkaLauncher.java);
# its log dir is a fresh folder under /tmp. KAFKA_HEAP_OPTS sets the heap, as in that image.
set -euo pipefail
# shellcheck disable=SC2086 # KAFKA_HEAP_OPTS is a list of options
exec java ${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m} -XX:+UseSerialGC -cp '/opt/kafka/lib/*:/opt/kafka/classes' \
    KafkaLauncher /tmp/kafka --from-environment
