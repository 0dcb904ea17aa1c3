"""Small runtime helpers shared by the engine and the connectors: the system clock, a
self-pipe wakeup, and one retry/backoff helper on the injected clock."""
