"""MQTT 3.1.1 and 5.0 front end: pure packets, codec, topics and session state machine."""
