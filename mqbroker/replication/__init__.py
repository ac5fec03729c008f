"""Partition replication: ISR and high-watermark decisions, leadership, the follower fetcher."""
