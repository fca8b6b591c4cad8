# Generated from emq/queue/_async/__init__.py by scripts/unasync.py: edit that file instead.
"""One shell per file: the queue, its reads and control, dead letters, partitions, the
event stream and job history (see :mod:`emq.queue`)."""
