"""The Redis connectors on txredisapi: a sink (topics into a Stream, pub/sub channels or keys) and a
source (a Stream through a consumer group, or a list through a processing list, into a topic)."""
