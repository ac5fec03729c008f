"""Kafka message definitions, written from Kafka's published protocol specification."""
