"""Cluster-to-cluster mirroring over the native protocol: topics copied batch for batch from a source
cluster into this one, topic configs and partition counts kept in step, consumer-group offsets
translated so a group can fail over to this cluster."""
