"""Push subscriptions: a share group whose consumer is the broker, POSTing each record to an HTTP endpoint.

Pure: ``filters`` (which records a subscription wants), ``signing`` (HMAC signatures and the request
a record becomes), ``pacing`` (retry backoff and the rate limit). Twisted: ``dispatcher`` (one
subscription's deliveries) and ``http`` (the Agent that sends them).
"""
