"""Read-only admin views of jobs, dead letters and workers; cancel and replay as permissioned actions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from soniq import Soniq
from soniq_django.config import default_alias
from soniq_django.models import DeadLetterJob, Job, Worker
from soniq_django.runtime import with_app

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:  # django-stubs' generic parameter; Django's own ModelAdmin takes none at run time
    _ModelAdmin = admin.ModelAdmin


def _has_perm(request: HttpRequest, permission: str) -> bool:
    # Any user model: `has_perm` comes from PermissionsMixin (or the project's own), not AbstractBaseUser.
    has_perm = getattr(request.user, "has_perm", None)
    return bool(has_perm and has_perm(permission))


class ReadOnlyAdmin(_ModelAdmin):
    """Soniq's backend owns these rows: the admin shows them and changes them only through Soniq's API."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_name", "status", "queue", "priority", "attempts", "scheduled_at", "created_at")
    list_filter = ("status", "queue")
    search_fields = ("id", "job_name")
    actions = ("cancel_jobs",)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return _has_perm(request, "soniq_django.cancel_job")

    @admin.action(description="Cancel selected jobs (running ones are asked to stop)", permissions=["cancel"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = [str(pk) for pk in queryset.values_list("pk", flat=True)]

        async def cancel(app: Soniq) -> int:
            return sum([await app.cancel_job(job_id) for job_id in ids])

        cancelled = with_app(default_alias(), cancel)
        self.message_user(
            request,
            f"Cancelled or asked to stop {cancelled} of {len(ids)} job(s); finished jobs are left as they are.",
        )


@admin.register(DeadLetterJob)
class DeadLetterJobAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_name", "queue", "attempts", "dead_letter_reason", "moved_to_dead_letter_at")
    list_filter = ("queue", "dead_letter_reason")
    search_fields = ("id", "job_name")
    actions = ("replay_jobs",)

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return _has_perm(request, "soniq_django.replay_deadletterjob")

    @admin.action(description="Replay selected dead-letter jobs", permissions=["replay"])
    def replay_jobs(self, request: HttpRequest, queryset: QuerySet[DeadLetterJob]) -> None:
        ids = [str(pk) for pk in queryset.values_list("pk", flat=True)]

        async def replay(app: Soniq) -> list[str]:
            return [await app.dead_letter.replay(job_id) for job_id in ids]

        new_ids = with_app(default_alias(), replay)
        self.message_user(request, f"Queued {len(new_ids)} new job(s): {', '.join(new_ids)}", messages.SUCCESS)


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ("id", "hostname", "pid", "status", "concurrency", "queues", "last_heartbeat", "started_at")
    list_filter = ("status",)
