"""Wire formats: each turns an event (and its table's metadata) into bytes; transports
(outputs) carry the bytes."""
