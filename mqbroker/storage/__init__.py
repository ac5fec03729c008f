"""Segmented, crash-safe partition logs: a synchronous library with no Twisted in it."""
