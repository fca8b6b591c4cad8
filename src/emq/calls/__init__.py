"""The verbs as Python builds them, with no I/O: one module per family of scripts.

``call.py`` holds :class:`~emq.calls.call.Call` (one script invocation and the decoder of its
reply) and what every family shares; ``jobs.py`` the life of a job (:class:`QueueCore`);
``control``, ``results``, ``repeats``, ``flows``, ``partitions`` and ``deadletters`` the
rest. Every input is checked here, before a key is built or a byte is sent.
"""
