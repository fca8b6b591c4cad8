"""The Django app ``emq.contrib.django``: it adds the ``emq_worker`` management command."""

from __future__ import annotations

from django.apps import AppConfig


class EmqConfig(AppConfig):  # type: ignore[misc]  # Django is untyped
    name = "emq.contrib.django"
    label = "emq"
    verbose_name = "emq"
