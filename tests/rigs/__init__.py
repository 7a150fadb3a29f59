"""Test rigs: processes the tests and benchmarks start beside Exactly's broker, outside the
runtime package (exactly.testing keeps EmbeddedBroker, which users start too).

- kafka: Apache Kafka 4.4 (`ApacheKafka`, one node or a cluster) and its pytest fixtures
- powercut: the power-cut filesystem (`PowerCutFS`, FUSE, LazyFS's model)
- postgres: a private PostgreSQL server (`PrivatePostgres`)
- spark_connect: a Spark Connect server (`SparkConnectServer`)
"""
