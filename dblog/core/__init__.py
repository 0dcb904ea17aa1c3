"""The pure core: the event model, the position protocol, the chunk window and its drop rule,
dumps and their progress, acknowledgements and commit points, and the recent-transaction keys.
Nothing here does I/O, takes a lock or reads a clock."""
