"""Shared memory: segments (created/unlinked by the supervisor only), SPSC rings, the layouts of
the shared control block and tables, and blocking wake-ups."""
