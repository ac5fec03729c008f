"""The native binary protocol: pure message types, schema-driven codec and sans-I/O connections.

One codec serves the broker, the Twisted client and the blocking client. The wire format is
documented in docs/protocol.md.
"""
