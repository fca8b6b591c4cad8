"""``emq worker emq.contrib.django.entry:worker``: a Django project's worker as an import
string, for the ``emq worker`` command (``manage.py emq_worker`` runs it so, and so does each
process of ``--processes N``).

Reading ``worker`` sets Django up (``DJANGO_SETTINGS_MODULE``) if it is not yet, then builds
the worker of the backend ``EMQ_DJANGO_BACKEND`` names (:func:`.handlers.build_worker`).
Importing this module does neither.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name != "worker":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()
    from .handlers import build_worker

    return build_worker()
