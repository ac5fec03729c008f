#!/usr/bin/env bash
# Installs everything the test suite needs (Debian packages, the package with its test extras)
# and runs the suite. This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# gcc and python3-dev: the install compiles the C record decoder (mqbroker/records/_section.c)
DEBIAN_PACKAGES=(gcc python3-dev mosquitto mosquitto-clients amqp-tools redis-server libaio1 libfaketime kcat maven openjdk-17-jdk-headless chromium chromium-driver)
missing=()
for package in "${DEBIAN_PACKAGES[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

python3 -m pip install -q --upgrade pip setuptools wheel
# compat mode: twistd's plugin scan walks sys.path directories, which a strict editable
# install of a flat layout does not put the repository on (see docs/operations.md).
python3 -m pip install -q -e '.[test]' --config-settings editable_mode=compat
# Apache Kafka from Maven Central: the reference broker and Kafka's own tools (tests/kafka_reference/)
bash tests/kafka_reference/kafka_reference.sh install

# Byte-compile the package once: every broker and CLI process the tests start imports it, and where
# PYTHONDONTWRITEBYTECODE is set (as on our machines) each would compile it from source again (~0.3 s of CPU).
python3 -m compileall -q -j 0 mqbroker

export PYSPARK_PYTHON="$(command -v python3)" SPARK_LOCAL_IP=127.0.0.1
# Three workers (MQBROKER_TEST_WORKERS; 0 runs the suite in this one process): most integration tests wait
# rather than compute, so three share the two cores well. Each module runs whole on one worker, the Spark
# modules on one together, and tests marked `alone` while the other workers pause (tests/parallel.py).
python3 -m pytest -q -n "${MQBROKER_TEST_WORKERS:-3}" --dist loadscope "$@"
