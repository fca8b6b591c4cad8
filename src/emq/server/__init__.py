"""Where the server is and what it promises: one URL -> one client (standalone, cluster or
Sentinel), the probe of what the server can do, durable dispatch, and the known queues."""
