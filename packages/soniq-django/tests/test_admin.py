"""The admin shows Soniq's tables read-only; cancel and replay are actions behind their permissions."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from djproject.testapp.tasks import add, fail
from workers import WorkerProcess

from soniq_django.models import DeadLetterJob, Job

pytestmark = pytest.mark.usefixtures("soniq_db")


def staff_client(*permissions: str) -> Client:
    user = User.objects.create_user("operator", password="pw", is_staff=True)
    for codename in permissions:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="soniq_django", codename=codename))
    client = Client()
    client.force_login(user)
    return client


def test_changelists_and_detail_pages_render_read_only(admin_client: Client) -> None:
    result = add.enqueue(1, 2)
    for model in ("job", "deadletterjob", "worker"):
        assert admin_client.get(reverse(f"admin:soniq_django_{model}_changelist")).status_code == 200
    page = admin_client.get(reverse("admin:soniq_django_job_change", args=[result.id]))
    assert page.status_code == 200
    assert b"djproject.testapp.tasks.add" in page.content
    assert b'name="_save"' not in page.content  # nothing to save: the row belongs to Soniq
    assert admin_client.get(reverse("admin:soniq_django_job_add")).status_code == 403


def test_cancel_action_cancels_queued_jobs_for_users_with_the_permission() -> None:
    result = add.enqueue(1, 2)
    url = reverse("admin:soniq_django_job_changelist")
    client = staff_client("view_job", "cancel_job")
    assert b"cancel_jobs" in client.get(url).content

    response = client.post(url, {"action": "cancel_jobs", "_selected_action": [result.id]}, follow=True)

    assert response.status_code == 200
    assert Job.objects.get(pk=result.id).status == "cancelled"
    assert b"Cancelled or asked to stop 1 of 1" in response.content


def test_without_the_permission_there_is_no_cancel_action() -> None:
    result = add.enqueue(1, 2)
    url = reverse("admin:soniq_django_job_changelist")
    client = staff_client("view_job")
    assert b"cancel_jobs" not in client.get(url).content

    client.post(url, {"action": "cancel_jobs", "_selected_action": [result.id]})

    assert Job.objects.get(pk=result.id).status == "queued"


def test_replay_action_queues_a_fresh_copy_of_a_dead_letter(start_worker: Callable[..., WorkerProcess]) -> None:
    failed = fail.enqueue("boom")
    worker = start_worker("--run-once")
    assert worker.wait(timeout=60) == 0, worker.log
    assert DeadLetterJob.objects.filter(pk=failed.id).exists(), worker.log
    url = reverse("admin:soniq_django_deadletterjob_changelist")
    assert b"replay_jobs" not in staff_client("view_deadletterjob").get(url).content
    User.objects.all().delete()
    client = staff_client("view_deadletterjob", "replay_deadletterjob")

    client.post(url, {"action": "replay_jobs", "_selected_action": [failed.id]})

    (replayed,) = Job.objects.filter(job_name="djproject.testapp.tasks.fail")
    assert replayed.id != failed.id
    assert replayed.status == "queued"
    assert replayed.args["args"] == ["boom"]
    assert DeadLetterJob.objects.get(pk=failed.id).resurrection_count == 1
