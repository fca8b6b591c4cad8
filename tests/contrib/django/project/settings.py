"""The settings of the tiny Django project the tests drive: the server and the queues come
from the environment (``EMQ_URL``, ``EMQ_TEST_QUEUES``), so a worker subprocess and the test
process agree on them."""

import os

SECRET_KEY = "emq-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
ROOT_URLCONF = "tests.contrib.django.project.urls"
DATABASES: dict[str, dict[str, str]] = {}
INSTALLED_APPS = ["django_tasks", "emq.contrib.django"]
TASKS = {
    "default": {
        "BACKEND": "emq.contrib.django.EmqTaskBackend",
        "QUEUES": os.environ.get("EMQ_TEST_QUEUES", "default").split(","),
        "OPTIONS": {"url": os.environ.get("EMQ_URL", "redis://127.0.0.1:1")},
    }
}
