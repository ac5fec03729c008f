"""AMQP 0-9-1 ("AMQP-lite") front end: pure spec tables, codec, state machines and routing."""
