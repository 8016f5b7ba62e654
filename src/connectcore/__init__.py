"""connectcore: the rules of connect as pure state machines; time, ids and screens come in as values,
what must happen goes out as effects (plain data). No I/O, no clock, no randomness, no event loop."""
