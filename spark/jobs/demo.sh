#!/usr/bin/env bash
# The IoT demo: a broker, N simulated MQTT devices, the Spark job, and a subscriber printing
# alerts and aggregates. DEVICES, DURATION_S and MASTER (default local[*]) can be set. It stops by
# itself DURATION_S (+10) seconds later, or at Ctrl-C; either way everything it started is stopped.
set -euo pipefail
cd "$(dirname "$0")/../.."

DEVICES="${DEVICES:-5}" DURATION_S="${DURATION_S:-60}" MASTER="${MASTER:-local[*]}"
NATIVE_PORT="${NATIVE_PORT:-19393}" MQTT_PORT="${MQTT_PORT:-11883}" HTTP_PORT="${HTTP_PORT:-19394}"
WORK="$(mktemp -d /tmp/mqbroker-demo.XXXXXX)"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$(command -v python3)}" SPARK_LOCAL_IP=127.0.0.1
pids=()
cleanup() {
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    echo "demo stopped"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

python3 -c "from twisted.scripts.twistd import run; run()" -n --pidfile= --logfile="$WORK/broker.log" mqbroker \
    --data-dir "$WORK/data" --host 127.0.0.1 --native-port "$NATIVE_PORT" --mqtt-port "$MQTT_PORT" \
    --amqp-port 0 --http-port "$HTTP_PORT" --controller-port 0 &
pids+=($!)
until curl -sf "http://127.0.0.1:$HTTP_PORT/ready" >/dev/null; do
    kill -0 "${pids[0]}" 2>/dev/null || { echo "the broker did not start: see $WORK/broker.log" >&2; exit 1; }
    sleep 0.2
done
echo "broker ready (native $NATIVE_PORT, MQTT $MQTT_PORT); logs in $WORK"

mosquitto_sub -h 127.0.0.1 -p "$MQTT_PORT" -V mqttv5 -t 'devices/+/alerts' -t 'aggregates/#' -v &
pids+=($!)
python3 -m mqbroker_spark.jobs.iot_aggregates --master "$MASTER" --bootstrap "127.0.0.1:$NATIVE_PORT" \
    --checkpoint-dir "$WORK/checkpoints" --starting-offsets earliest >"$WORK/spark.log" 2>&1 &
pids+=($!)
echo "spark job starting on $MASTER (log: $WORK/spark.log); $DEVICES devices publish for ${DURATION_S}s"
python3 -m mqbroker_spark.jobs.device_simulator --port "$MQTT_PORT" --devices "$DEVICES" --duration-s "$DURATION_S"
sleep 10  # the job's last micro-batches; a window still open when readings stop is never closed
