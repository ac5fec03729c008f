"""Consumer groups: the pure coordinator state machine, the assignors and the offsets record format.

``coordinator`` holds the membership protocol, ``assignors`` decides who reads what, and
``offsets`` is the ``__consumer_offsets`` record codec plus the store replayed from it.
Nothing here does I/O or reads a clock: the broker adapter passes ``now_ms`` in, writes the
records handed out and turns the typed results into replies.
"""
