#!/usr/bin/env bash
# Apache Kafka as the reference for mqbroker's Kafka front end (docs/kafka.md, "The reference").
#
#   kafka_reference.sh install                 fetch Apache Kafka's jars from Maven Central into lib/ (pom.xml),
#                                              and Spark's Kafka connector into spark/lib/ (spark/pom.xml)
#   kafka_reference.sh start DIR PORT [K=V...] format DIR and start one KRaft broker+controller on
#                                              127.0.0.1:PORT (controller on PORT+1); extra server properties
#                                              as K=V; returns once the broker answers
#   kafka_reference.sh stop DIR                stop the broker started in DIR (SIGTERM, then SIGKILL)
#   kafka_reference.sh TOOL ARGS...            run one of Kafka's command-line tools, e.g.
#                                              kafka-topics --bootstrap-server 127.0.0.1:9092 --list
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
LIB="$HERE/lib"
JAVA_OPTIONS=(-Xms64m -Xmx512m -XX:+UseSerialGC -Djava.awt.headless=true)

classpath() {
    [ -d "$LIB" ] || { echo "Apache Kafka is not installed: run $0 install" >&2; exit 2; }
    echo "$LIB/*"
}

tool_class() {
    case "$1" in
        kafka-topics) echo org.apache.kafka.tools.TopicCommand ;;
        kafka-console-producer) echo org.apache.kafka.tools.ConsoleProducer ;;
        kafka-console-consumer) echo org.apache.kafka.tools.consumer.ConsoleConsumer ;;
        kafka-consumer-groups) echo org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
        kafka-configs) echo kafka.admin.ConfigCommand ;;
        kafka-producer-perf-test) echo org.apache.kafka.tools.ProducerPerformance ;;
        kafka-consumer-perf-test) echo org.apache.kafka.tools.ConsumerPerformance ;;
        kafka-storage) echo kafka.tools.StorageTool ;;
        kafka-transactions) echo org.apache.kafka.tools.TransactionsCommand ;;
        kafka-cluster) echo org.apache.kafka.tools.ClusterTool ;;
        kafka-leader-election) echo org.apache.kafka.tools.LeaderElectionCommand ;;
        kafka-log-dirs) echo org.apache.kafka.tools.LogDirsCommand ;;
        kafka-metadata-quorum) echo org.apache.kafka.tools.MetadataQuorumCommand ;;
        kafka-reassign-partitions) echo org.apache.kafka.tools.reassign.ReassignPartitionsCommand ;;
        *) echo "unknown tool $1" >&2; exit 2 ;;
    esac
}

run_tool() {
    local class
    class="$(tool_class "$1")"
    shift
    exec java "${JAVA_OPTIONS[@]}" -Dlog4j2.configurationFile="$HERE/log4j2-tools.xml" -cp "$(classpath)" "$class" "$@"
}

start() {
    local dir="$1" port="$2"
    shift 2
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    local controller_port=$((port + 1))
    cat > "$dir/server.properties" <<PROPERTIES
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/logs
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=200
PROPERTIES
    for setting in "$@"; do echo "$setting" >> "$dir/server.properties"; done
    if [ ! -f "$dir/logs/meta.properties" ]; then
        java "${JAVA_OPTIONS[@]}" -Dlog4j2.configurationFile="$HERE/log4j2-tools.xml" -cp "$(classpath)" \
            kafka.tools.StorageTool format -t MqbrokerReference0000w -c "$dir/server.properties" >/dev/null
    fi
    KAFKA_LOG_DIR="$dir" nohup java "${JAVA_OPTIONS[@]}" -Dkafka.logs.dir="$dir" \
        -Dlog4j2.configurationFile="$HERE/log4j2-broker.xml" -cp "$(classpath)" kafka.Kafka "$dir/server.properties" \
        > "$dir/stdout.log" 2>&1 &
    echo $! > "$dir/kafka.pid"
    for _ in $(seq 1 600); do
        if ! kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null; then
            echo "Apache Kafka exited during start-up:" >&2; tail -40 "$dir/stdout.log" "$dir/server.log" >&2 || true; exit 1
        fi
        if grep -q "Kafka Server started" "$dir/server.log" 2>/dev/null; then exit 0; fi
        sleep 0.1
    done
    echo "Apache Kafka did not start within 60 s; see $dir/server.log" >&2
    exit 1
}

stop() {
    local pid_file="$1/kafka.pid"
    [ -f "$pid_file" ] || return 0
    local pid
    pid="$(cat "$pid_file")"
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pid_file"
}

case "${1:-}" in
    install)  # Apache Kafka, and Spark's Kafka connector (spark/pom.xml) for the Spark tests
        cd "$HERE" && mvn -q -B dependency:copy-dependencies -DoutputDirectory=lib -DincludeScope=runtime
        cd "$HERE/spark" && mvn -q -B dependency:copy-dependencies -DoutputDirectory=lib -DincludeScope=runtime ;;
    start) shift; start "$@" ;;
    stop) shift; stop "$@" ;;
    "") sed -n '2,12p' "$0"; exit 2 ;;
    *) run_tool "$@" ;;
esac
