"""Unmanaged models over Soniq's tables (SPEC section 6), for the admin and for reading results.

Django never creates, alters or deletes these tables: Soniq's backend owns
them (the ``0001`` migration asks it to create them). Writes go through
Soniq's API, never through these models.
"""

from __future__ import annotations

from django.db import models

from soniq_django.fields import SoniqJSONField, SoniqTimestampField


class Job(models.Model):
    id: models.TextField[str, str] = models.TextField(primary_key=True)
    job_name: models.TextField[str, str] = models.TextField()
    args = SoniqJSONField()
    status: models.TextField[str, str] = models.TextField()
    attempts: models.IntegerField[int, int] = models.IntegerField()
    max_attempts: models.IntegerField[int, int] = models.IntegerField()
    queue: models.TextField[str, str] = models.TextField()
    priority: models.IntegerField[int, int] = models.IntegerField()
    scheduled_at = SoniqTimestampField()
    last_error: models.TextField[str | None, str | None] = models.TextField(null=True)
    worker_id: models.TextField[str | None, str | None] = models.TextField(null=True)
    result = SoniqJSONField(null=True)
    started_at = SoniqTimestampField(null=True)
    created_at = SoniqTimestampField()
    updated_at = SoniqTimestampField()

    class Meta:
        managed = False
        db_table = "soniq_jobs"
        ordering = ("-created_at", "-id")
        verbose_name = "job"
        permissions = (("cancel_job", "Can cancel queued jobs"),)

    def __str__(self) -> str:
        return f"{self.job_name} {self.id}"


class DeadLetterJob(models.Model):
    id: models.TextField[str, str] = models.TextField(primary_key=True)
    job_name: models.TextField[str, str] = models.TextField()
    args = SoniqJSONField()
    queue: models.TextField[str, str] = models.TextField()
    attempts: models.IntegerField[int, int] = models.IntegerField()
    last_error: models.TextField[str | None, str | None] = models.TextField(null=True)
    dead_letter_reason: models.TextField[str, str] = models.TextField()
    moved_to_dead_letter_at = SoniqTimestampField()
    resurrection_count: models.IntegerField[int, int] = models.IntegerField()
    last_resurrection_at = SoniqTimestampField(null=True)

    class Meta:
        managed = False
        db_table = "soniq_dead_letter_jobs"
        ordering = ("-moved_to_dead_letter_at", "-id")
        verbose_name = "dead-letter job"
        permissions = (("replay_deadletterjob", "Can replay dead-letter jobs"),)

    def __str__(self) -> str:
        return f"{self.job_name} {self.id}"


class Worker(models.Model):
    id: models.TextField[str, str] = models.TextField(primary_key=True)
    hostname: models.TextField[str, str] = models.TextField()
    pid: models.IntegerField[int, int] = models.IntegerField()
    queues = SoniqJSONField(null=True)
    concurrency: models.IntegerField[int, int] = models.IntegerField()
    status: models.TextField[str, str] = models.TextField()
    last_heartbeat = SoniqTimestampField()
    started_at = SoniqTimestampField()

    class Meta:
        managed = False
        db_table = "soniq_workers"
        ordering = ("-started_at", "-id")
        verbose_name = "worker"

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"
