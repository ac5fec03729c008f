"""Transactions (KIP-98, KIP-890 part 1): the pure transaction coordinator, its log records, and the Twisted service hosting it."""
