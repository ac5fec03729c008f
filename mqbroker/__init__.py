"""mqbroker: a partitioned, replicated commit-log message broker on Twisted."""

__version__ = "0.1.0"
