"""Wire protocols: pure codecs and state machines, plus one thin Twisted adapter each."""
