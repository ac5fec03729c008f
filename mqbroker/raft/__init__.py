"""The in-process Raft controller: a pure consensus core plus its Twisted node and transport."""
