"""The broker core: produce, fetch and its waiting fetches, topic administration, producer ids."""
