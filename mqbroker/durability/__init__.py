"""Durability services: group-commit flushing, the fsync engines and the log cleaner service."""
