"""Schedules, the leader lease and pruning in Redis: arguments for the scripts and their replies.

Keys (under the namespace prefix): ``schedule:<name>`` (a hash per schedule),
``schedules`` (the set of names), ``schedules_due`` (unpaused names scored by
`next_run`), ``lease:<name>`` (a hash per lease) and ``exp`` (ids of rows
completed with an `expires_at`, scored by it). Each write is one script, so
`schedule_fire` checks the expected `next_run` and inserts the jobs with no
other command in between, and `lease_acquire` reads and writes the lease on the
server's clock (TIME) in one step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from soniq.backend import FireScheduleParams, LeaseRecord, NewJob, ScheduleRecord, UpsertScheduleParams, decode_args
from soniq_redis.rows import dumps, from_micros, pairs, to_micros


def upsert_args(params: UpsertScheduleParams) -> list[str | int]:
    return [
        params.name,
        params.job_name,
        params.queue,
        params.priority,
        params.max_attempts,
        dumps(dict(params.args)),
        params.cron or "",
        "" if params.every_seconds is None else repr(float(params.every_seconds)),
        params.timezone,
        params.catch_up,
        params.catch_up_limit,
        "" if params.paused is None else str(int(params.paused)),
        to_micros(params.next_run),
        "1" if params.reset_next_run else "0",
    ]


def job_args(jobs: Sequence[NewJob]) -> list[str | int]:
    """The per-job arguments `schedule_fire.lua` reads, eleven per job."""
    args: list[str | int] = []
    for job in jobs:
        args += [
            job.id,
            job.job_name,
            dumps(dict(job.args)),
            job.queue,
            job.priority,
            to_micros(job.scheduled_at),
            job.max_attempts,
            "" if job.trace_context is None else dumps(dict(job.trace_context)),
            "0" if job.limit_key is None else "1",
            job.limit_key or "",
            max(1, job.version),
        ]
    return args


def fire_args(params: FireScheduleParams) -> list[str | int]:
    return [
        params.name,
        to_micros(params.expected_next_run),
        to_micros(params.new_next_run),
        to_micros(params.fired_at),
        len(params.jobs),
        *job_args(params.jobs),
    ]


def schedule_record(flat: Sequence[Any]) -> ScheduleRecord:
    fields = pairs(flat)
    return schedule_from_fields(fields)


def schedule_from_fields(fields: Mapping[str, str]) -> ScheduleRecord:
    # The args were JSON-encoded by us; an unreadable value (a hand edit) is shown as empty.
    args, _ = decode_args(fields.get("args"))
    every = fields.get("every_seconds")
    last_run = fields.get("last_run")
    return ScheduleRecord(
        name=fields["name"],
        job_name=fields["job_name"],
        queue=fields["queue"],
        priority=int(fields["priority"]),
        max_attempts=int(fields["max_attempts"]),
        args=args,
        cron=fields.get("cron"),
        every_seconds=None if every is None else float(every),
        timezone=fields["timezone"],
        catch_up=fields["catch_up"],
        catch_up_limit=int(fields["catch_up_limit"]),
        paused=fields.get("paused") == "1",
        next_run=from_micros(fields["next_run"]),
        last_run=None if last_run is None else from_micros(last_run),
        run_count=int(fields.get("run_count", "0")),
        last_job_id=fields.get("last_job_id"),
        created_at=from_micros(fields["created_at"]),
        updated_at=from_micros(fields["updated_at"]),
    )


def lease_record(flat: Sequence[Any]) -> LeaseRecord:
    fields = pairs(flat)
    return LeaseRecord(
        name=fields["name"],
        holder=fields["holder"],
        acquired_at=from_micros(fields["acquired_at"]),
        renewed_at=from_micros(fields["renewed_at"]),
        expires_at=from_micros(fields["expires_at"]),
    )
