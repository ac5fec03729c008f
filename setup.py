"""Packaging for mqbroker: the broker package, the twistd plugin and the Spark data source."""

from setuptools import Extension, find_packages, setup

RUNTIME_REQUIREMENTS = [
    "twisted[tls]>=24.3",
    "zope.interface>=6.0",
    "txredisapi>=1.4",
    "cryptography>=42",
    "service-identity>=24.1",
    "crc32c>=2.4",
    "zstandard>=0.22",
    "lz4>=4.3",
    "cramjam>=2.8",
    "rich>=13",
    "prometheus_client>=0.20",
    # the admin API validates request bodies against the schemas its OpenAPI document publishes
    "jsonschema>=4.18",
    # fsync rounds through Linux AIO (needs the system's libaio.so.1; without it a thread does them)
    'libaio>=0.9.1; sys_platform == "linux"',
    # the mirror reads and writes Kafka-protocol clusters (Apache Kafka, Redpanda) with librdkafka
    "confluent-kafka>=2.6",
]

TEST_REQUIREMENTS = [
    "pytest>=8",
    "pytest-twisted>=1.14",
    # scripts/test.sh runs the suite in worker processes (tests/parallel.py)
    "pytest-xdist>=3.6",
    "hypothesis>=6.100",
    "import-linter>=2.0",
    "ruff>=0.6",
    "paho-mqtt>=2.0",
    "pika>=1.3",
    "kombu>=5.3",
    "aio-pika>=9.4",
    # Kafka clients the Kafka front end is tested with
    "kafka-python>=3.0",
    "aiokafka>=0.14",  # (and confluent-kafka, a runtime requirement above)
    # the admin API's OpenAPI document, its fuzzing, and the console in Debian's chromium (never `playwright install`)
    "openapi-spec-validator>=0.7",
    "schemathesis>=3.30",
    "playwright>=1.40",
    # an independent Redis client: the connector tests check what reached Redis with it (the connectors use txredisapi)
    "redis>=5",
]

SPARK_REQUIREMENTS = ["pyspark>=4.0", "pyarrow>=15"]

# The consumer's record decoder in C (the CPython API, no other build dependency; needs a C compiler and the
# Python headers). Optional: without a compiler the install still works and reads records with the pure-Python
# reference decoder, several times slower (mqbroker.records.decoder.COMPILED_SECTION_DECODER says which).
EXTENSIONS = [
    Extension("mqbroker.records._section", ["mqbroker/records/_section.c"], optional=True),
    # an AMQP share queue's deliveries, a fetch's worth at once (the reference: protocols/amqp/delivery_frames.py)
    Extension("mqbroker.protocols.amqp._delivery_frames", ["mqbroker/protocols/amqp/_delivery_frames.c"],
              optional=True),
    # the frames of an AMQP read, a published message as one item (the reference: protocols/amqp/frame_split.py)
    Extension("mqbroker.protocols.amqp._frame_split", ["mqbroker/protocols/amqp/_frame_split.c"], optional=True),
    # a producer batch's records, one C call per record (the reference: client/batch_records.py)
    Extension("mqbroker.client._batch_records", ["mqbroker/client/_batch_records.c"], optional=True),
    # the ``worker`` fsync engine's thread, which never takes the interpreter lock (durability/sync_engines.py)
    Extension("mqbroker.durability._fsync_worker", ["mqbroker/durability/_fsync_worker.c"], optional=True),
]

setup(
    name="mqbroker",
    version="0.1.0",
    description="A distributed, partitioned, replicated commit-log message broker on Twisted "
    "speaking a native protocol, MQTT and AMQP 0-9-1",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(
        exclude=["tests", "tests.*", "benchmarks", "benchmarks.*", "spark", "spark.*", "mqbroker_spark", "mqbroker_spark.*"]
    )
    + ["twisted.plugins", "mqbroker_spark", "mqbroker_spark.jobs"],
    package_dir={"mqbroker_spark": "spark", "mqbroker_spark.jobs": "spark/jobs"},
    ext_modules=EXTENSIONS,
    install_requires=RUNTIME_REQUIREMENTS,
    extras_require={
        "test": TEST_REQUIREMENTS + SPARK_REQUIREMENTS,
        "spark": SPARK_REQUIREMENTS,
    },
    entry_points={"console_scripts": ["mqbroker = mqbroker.cli:main"]},
    include_package_data=True,
    package_data={"mqbroker.ops": ["static/*"]},
    zip_safe=False,
)
