"""Soniq rows as Django ``TaskResult`` objects.

Status mapping: ``queued`` is READY (also after a retry or a shutdown nack),
``processing`` is RUNNING, ``done`` is SUCCESSFUL; a job in the dead-letter
table (its retries used up) and a ``cancelled`` job are FAILED. Django counts
attempts as ``len(worker_ids)``; Soniq keeps only the current worker, so the
list holds that id (or ``""``) once per run so far.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils.module_loading import import_string

from soniq_django.config import BackendConfig
from soniq_django.execution import read_task_error

if TYPE_CHECKING:
    from soniq_django.models import DeadLetterJob, Job


def parse_error(text: str | None) -> TaskError | None:
    """The Django error a failed run left in ``last_error``."""
    if not text:
        return None
    raised = read_task_error(text)
    if raised is not None:
        path, trace = raised
        return TaskError(exception_class_path=path, traceback=trace)
    # Not raised by the task itself (a job timeout, an unknown job, a worker lost, a result no store
    # accepts, such as NaN): keep Soniq's text.
    name = text.partition(":")[0].strip()
    known = {"TimeoutError": "builtins.TimeoutError", "ResultError": "soniq.serialization.ResultError"}
    return TaskError(exception_class_path=known.get(name, "soniq.SoniqError"), traceback=text)


def _task_named(job_name: str, result_id: str) -> Task[Any, Any]:
    try:
        task = import_string(job_name)
    except ImportError:
        raise TaskResultDoesNotExist(f"job {result_id} runs {job_name!r}, which is not an importable task") from None
    if not isinstance(task, Task):
        raise TaskResultDoesNotExist(f"job {result_id} runs {job_name!r}, which is not a Django task")
    return task


def result_for(
    task: Task[Any, Any] | None, result_id: str, config: BackendConfig, *, running: bool = False
) -> TaskResult[Any, Any]:
    """The ``TaskResult`` of job `result_id`; raises ``TaskResultDoesNotExist``."""
    # Imported here: the backend (and so this module) may load while the app registry is still filling.
    from soniq_django.models import DeadLetterJob, Job

    job = Job.objects.using(config.database).filter(pk=result_id).first()
    if job is not None:
        return _from_job(task or _task_named(job.job_name, result_id), job, config, running=running)
    dead = DeadLetterJob.objects.using(config.database).filter(pk=result_id).first()
    if dead is not None:
        return _from_dead_letter(task or _task_named(dead.job_name, result_id), dead, config)
    raise TaskResultDoesNotExist(f"no Soniq job with id {result_id!r}")


def _call_args(stored: Any) -> tuple[list[Any], dict[str, Any]]:
    stored = stored if isinstance(stored, dict) else {}
    return list(stored.get("args", [])), dict(stored.get("kwargs", {}))


def _from_job(task: Task[Any, Any], job: Job, config: BackendConfig, *, running: bool) -> TaskResult[Any, Any]:
    status = {
        "queued": TaskResultStatus.READY,
        "processing": TaskResultStatus.RUNNING,
        "done": TaskResultStatus.SUCCESSFUL,
        "cancelled": TaskResultStatus.FAILED,
    }[job.status]
    runs = job.attempts + (1 if job.status in ("processing", "done") or running else 0)
    errors = [e for e in [parse_error(job.last_error)] if e is not None]
    if job.status == "cancelled":
        # A running job can be cancelled too; its handler had started.
        how = "cancelled while it ran" if job.started_at is not None else "cancelled before it ran"
        errors.append(TaskError(exception_class_path="soniq.SoniqError", traceback=how))
    args, kwargs = _call_args(job.args)
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=job.id,
        status=status,
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.updated_at if status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED) else None,
        last_attempted_at=job.started_at,
        args=args,
        kwargs=kwargs,
        backend=config.alias,
        errors=errors,
        worker_ids=[job.worker_id or ""] * runs,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result


def _from_dead_letter(task: Task[Any, Any], dead: DeadLetterJob, config: BackendConfig) -> TaskResult[Any, Any]:
    args, kwargs = _call_args(dead.args)
    error = parse_error(dead.last_error) or TaskError(
        exception_class_path="soniq.SoniqError", traceback=dead.dead_letter_reason
    )
    return TaskResult(
        task=task,
        id=dead.id,
        status=TaskResultStatus.FAILED,
        enqueued_at=None,
        started_at=None,
        finished_at=dead.moved_to_dead_letter_at,
        last_attempted_at=dead.moved_to_dead_letter_at,
        args=args,
        kwargs=kwargs,
        backend=config.alias,
        errors=[error],
        worker_ids=[""] * max(dead.attempts, 1),
    )
