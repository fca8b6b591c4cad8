"""The transitions as the server runs them: one ``<transition>.lua`` per state change, shared
functions in ``includes/``, composed by ``compose.py`` and dispatched EVALSHA-first by
``scripts.py`` (docs/lua-contract.md)."""
