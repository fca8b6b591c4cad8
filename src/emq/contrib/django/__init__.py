"""emq as a backend of Django's task framework (``django.tasks``, or the ``django_tasks``
backport before Django 6), and the Django app that gives ``manage.py emq_worker``.

``TASKS = {"default": {"BACKEND": "emq.contrib.django.EmqTaskBackend", "QUEUES":
["default"], "OPTIONS": {"url": "redis://..."}}}`` and ``"emq.contrib.django"`` in
``INSTALLED_APPS``. See docs/django.md. Importing this package imports no Django module:
the backend is loaded on first use of its name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import EmqTaskBackend

__all__ = ["EmqTaskBackend"]


def __getattr__(name: str) -> Any:
    if name == "EmqTaskBackend":
        from .backend import EmqTaskBackend

        return EmqTaskBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
