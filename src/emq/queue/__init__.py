"""The shells a user holds: :class:`~emq.Queue`, :class:`~emq.AsyncQueue` and their
partitioned forms, with their reads, control, dead letters, event stream and job history.

``_async/`` is written by hand; ``_sync/`` is generated from it, file by file, by
``scripts/unasync.py`` (``--check`` runs in ``scripts/test``), so a method and its twin differ
only where the I/O does. Edit ``_async/``, then run the script. :mod:`emq.queue.shared` holds
what both halves share that does no I/O.
"""
