"""Connectors: links between the log and other systems, run inside the broker (issue 21).

A connector is a named configuration of one type (``redis-sink``, ``redis-source``, ``mirror``)
split into tasks. Configurations, task status and task progress live in the compacted internal
topic ``__connectors``; a task runs on the broker leading its ``__connectors`` partition, so
tasks move with leadership when a broker dies. The package map:

- pure: ``model`` (values the admin surface returns), ``settings`` (typed, checked configuration),
  ``state`` (the ``__connectors`` record codec), ``view`` (the state folded, and which tasks run
  here), ``redis/entries``, ``redis/scripts``, ``mirror/naming``, ``mirror/offsets``, ``mirror/batches``;
- Twisted: ``broker_calls`` (every ``IBroker`` call the connectors make, in one thin module),
  ``store`` (tails and writes ``__connectors``), ``runtime`` (claims partitions, starts and stops
  tasks), ``task`` (the supervised task loop and its metrics), ``admin`` (create, pause, resume,
  delete, describe: the one service behind the native requests and the HTTP API), ``metrics``;
- ``redis/`` (txredisapi sink and source) and ``mirror/`` (cluster-to-cluster replication).
"""
