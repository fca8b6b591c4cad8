"""The nouns, with no I/O: job states and their graph, records, ids, key names, lanes,
payloads, settings and the events' contract. Everything else builds on these."""
