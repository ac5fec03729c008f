"""The native Python client: Producer, Consumer and Admin."""
