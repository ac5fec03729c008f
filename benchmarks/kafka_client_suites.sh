#!/usr/bin/env bash
# Run two public Kafka client test suites against mqbroker and against Apache Kafka (the reference in
# tests/kafka_reference), one broker at a time, and print each run's pass/fail summary:
#   kafka-python's integration tests (test/integration, an external broker through KAFKA_URI), and
#   confluent-kafka-python's integration tests (tests/integration/{admin,consumer,producer}, BROKERS).
# Their code stays out of this repository: give checkouts of both (git clones), e.g.
#   git clone https://github.com/dpkp/kafka-python "$WORK/kafka-python"
#   git clone https://github.com/confluentinc/confluent-kafka-python "$WORK/ck"
#
# usage: benchmarks/kafka_client_suites.sh WORK [kp|ck] [mq|ref]    (default: both suites, both brokers)
# WORK holds the two checkouts; results go to WORK/{kp,ck}-result-{mq,ref}.txt. Run from the repository
# root with PYTHONPATH pointing at it. Needs tests/kafka_reference/kafka_reference.sh install first.
set -u
WORK=$(cd "$1" && pwd); SUITES=${2:-"kp ck"}; BROKERS=${3:-"mq ref"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REF=$ROOT/tests/kafka_reference/kafka_reference.sh
free_port() {  # a free port P with P+1 free too (the reference's controller listens on P+1)
  python -c "
import socket
while True:
    first, second = socket.socket(), socket.socket()
    first.bind(('127.0.0.1', 0))
    try:
        second.bind(('127.0.0.1', first.getsockname()[1] + 1))
    except OSError:
        continue
    print(first.getsockname()[1])
    break"
}

# confluent-kafka's fixtures import trivup (a cluster launcher) even for a bring-your-own cluster,
# and its schema-registry helpers need a few libraries: a stub and a private target directory.
mkdir -p "$WORK/stubs/trivup/clusters" "$WORK/kafka-bin"  # kafka-bin: no broker scripts (the SSL tests need them)
touch "$WORK/stubs/trivup/__init__.py" "$WORK/stubs/trivup/clusters/__init__.py"
printf 'class KafkaCluster:  # stub: only the bring-your-own (BROKERS) fixture is used\n    pass\n' \
  > "$WORK/stubs/trivup/clusters/KafkaCluster.py"
[ -d "$WORK/srdeps" ] || python -m pip install -q --target "$WORK/srdeps" httpx authlib fastavro avro cachetools attrs \
  cryptography

start_broker() {  # start_broker mq|ref DIR PORT -> sets BROKER_PID (mq) ; returns once the port answers
  rm -rf "$2"; mkdir -p "$2"
  if [ "$1" = ref ]; then
    "$REF" start "$2" "$3" >/dev/null || exit 1
  else
    (cd "$ROOT" && exec python -c "from twisted.scripts.twistd import run; run()" -n --pidfile= \
      --logfile="$2/broker.log" mqbroker --data-dir "$2/data" --host 127.0.0.1 --native-port "$(free_port)" \
      --mqtt-port 0 --amqp-port 0 --kafka-port "$3" --kafka-tls-port 0 --http-port 0 --controller-port 0 \
      --set group_initial_rebalance_delay_ms=200) &
    BROKER_PID=$!
    for _ in $(seq 100); do (echo > "/dev/tcp/127.0.0.1/$3") 2>/dev/null && break; sleep 0.3; done
  fi
}

stop_broker() {  # stop_broker mq|ref DIR
  if [ "$1" = ref ]; then "$REF" stop "$2" >/dev/null; else kill "$BROKER_PID"; wait "$BROKER_PID" 2>/dev/null; fi
}

for suite in $SUITES; do
  for which in $BROKERS; do
    port=$(free_port)
    start_broker "$which" "$WORK/broker-$suite-$which" "$port"
    out=$WORK/$suite-result-$which.txt
    if [ "$suite" = kp ]; then
      (cd "$WORK/kafka-python" && PYTHONPATH=$WORK/kafka-python KAFKA_VERSION=4.1.1 KAFKA_ROOT=$WORK/kafka-bin \
        KAFKA_URI=PLAINTEXT://127.0.0.1:$port timeout 1800 python -m pytest -p no:cacheprovider \
        --basetemp="/tmp/pt-suite-kp-$which" -rfE -v --timeout=120 --timeout-method=signal test/integration) > "$out" 2>&1
    else
      (cd "$WORK/ck" && PYTHONPATH=$WORK/ck:$WORK/stubs:$WORK/srdeps BROKERS=127.0.0.1:$port timeout 1500 \
        python -m pytest -p no:cacheprovider --basetemp="/tmp/pt-suite-ck-$which" -rfE -v --timeout=120 \
        --timeout-method=signal tests/integration/admin tests/integration/consumer tests/integration/producer) \
        > "$out" 2>&1
    fi
    stop_broker "$which" "$WORK/broker-$suite-$which"
    echo "== $suite against $which:"
    grep -E "^(FAILED|ERROR) " "$out"
    grep -E "^=+ .*(passed|failed)" "$out" | tail -1
  done
done
