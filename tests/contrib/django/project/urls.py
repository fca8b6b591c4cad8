"""One view: enqueue ``add`` on the queue the query names, answer with the result's id."""

from django.http import HttpRequest, JsonResponse
from django.urls import path

from .tasks import add


def enqueue(request: HttpRequest) -> JsonResponse:
    result = add.using(queue_name=request.GET["queue"]).enqueue(
        int(request.GET["a"]), int(request.GET["b"])
    )
    return JsonResponse({"id": result.id, "status": result.status})


urlpatterns = [path("enqueue", enqueue)]
