"""Every span name, attribute key and event name soniq-otel emits.

The messaging keys follow the OpenTelemetry messaging semantic conventions
(`SCHEMA_URL`); they are spelled out here rather than imported from
`opentelemetry-semantic-conventions`, whose incubating module moves between
releases, so that a dashboard built on these names keeps working.
"""

from __future__ import annotations

from typing import Final

INSTRUMENTATION_NAME: Final = "soniq_otel"
SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.39.0"

# -- span names ----------------------------------------------------------------

SPAN_WORKER_SHUTDOWN: Final = "soniq.worker.shutdown"
SPAN_SHUTDOWN_TRANSITION: Final = "soniq.shutdown.transition"
SPAN_JOB_NACK: Final = "soniq.job.nack"
# Job spans are named "<operation name> <queue>", e.g. "send default", "process emails".

# -- OpenTelemetry messaging conventions -----------------------------------------

MESSAGING_SYSTEM: Final = "messaging.system"
MESSAGING_SYSTEM_SONIQ: Final = "soniq"
MESSAGING_OPERATION_TYPE: Final = "messaging.operation.type"
MESSAGING_OPERATION_NAME: Final = "messaging.operation.name"
MESSAGING_DESTINATION_NAME: Final = "messaging.destination.name"
MESSAGING_MESSAGE_ID: Final = "messaging.message.id"
MESSAGING_CLIENT_ID: Final = "messaging.client.id"
ERROR_TYPE: Final = "error.type"

OPERATION_SEND: Final = "send"
OPERATION_PROCESS: Final = "process"

# -- jobs ------------------------------------------------------------------------

JOB_NAME: Final = "soniq.job.name"
JOB_ATTEMPT: Final = "soniq.job.attempt"
"""1-based number of this run among the runs that count against the retry budget."""
JOB_MAX_ATTEMPTS: Final = "soniq.job.max_attempts"
JOB_HANDLER_KIND: Final = "soniq.job.handler_kind"
"""A `soniq.HandlerKind` value: ``async``, ``sync`` or ``unknown``."""
JOB_OUTCOME: Final = "soniq.job.outcome"
"""A `soniq.JobOutcome` value (core's one vocabulary); ``unfinished`` when the worker stopped
before reporting the job's end."""
JOB_ERROR: Final = "soniq.job.error"
"""The error text as stored in the row's `last_error`."""

EVENT_JOB_OUTCOME_PREFIX: Final = "soniq.job."
"""Every outcome but ``done`` is also an event on the consumer span: ``soniq.job.retry`` and so on."""

# -- workers and shutdown --------------------------------------------------------

WORKER_ID: Final = "soniq.worker.id"

SHUTDOWN_FROM_STATE: Final = "soniq.shutdown.from_state"
SHUTDOWN_TO_STATE: Final = "soniq.shutdown.to_state"
SHUTDOWN_REASON: Final = "soniq.shutdown.reason"
"""Why the worker moved on, e.g. ``SIGTERM``, ``drained``, ``shutdown_timeout elapsed``, ``second signal``."""
SHUTDOWN_TRIGGER: Final = "soniq.shutdown.trigger"
"""The signal name (``SIGTERM``, ``SIGINT``), or ``run_once`` / ``stop``."""
SHUTDOWN_TIMEOUT: Final = "soniq.shutdown.shutdown_timeout"
SHUTDOWN_SYNC_GRACE: Final = "soniq.shutdown.sync_handler_grace_seconds"
SHUTDOWN_JOB_TIMEOUT: Final = "soniq.shutdown.job_timeout"
SHUTDOWN_PREFETCH_RELEASE_TIMEOUT: Final = "soniq.shutdown.prefetch_release_timeout"
SHUTDOWN_IN_FLIGHT_ASYNC: Final = "soniq.shutdown.in_flight.async"
SHUTDOWN_IN_FLIGHT_SYNC: Final = "soniq.shutdown.in_flight.sync"
SHUTDOWN_PREFETCHED: Final = "soniq.shutdown.prefetched"
SHUTDOWN_NACKED_JOB_IDS: Final = "soniq.shutdown.nacked_job_ids"
SHUTDOWN_NACKED_COUNT: Final = "soniq.shutdown.nacked_count"
SHUTDOWN_STATES: Final = "soniq.shutdown.states"
"""Every state the worker passed through, RUNNING first, STOPPED last."""
SHUTDOWN_WAITING_JOB_IDS: Final = "soniq.shutdown.waiting_job_ids"
"""The jobs whose sync threads the worker waits for."""
SHUTDOWN_NOTICE_PREFIX: Final = "soniq.shutdown."

EVENT_SYNC_GRACE_EXPIRED: Final = "soniq.shutdown.sync_grace_expired"

# -- nacks -----------------------------------------------------------------------

NACK_REASON: Final = "soniq.nack.reason"
"""``shutdown_timeout``, ``second_signal``, ``cancelled``, ``prefetch_release`` or ``unknown_job``."""
NACK_WRITTEN: Final = "soniq.nack.written"
"""False when the store could not be reached or the row was no longer this worker's."""
NACK_ERROR: Final = "soniq.nack.error"

# -- schedules ----------------------------------------------------------

SPAN_SCHEDULE_FIRE: Final = "soniq.schedule.fire"
SCHEDULE_NAME: Final = "soniq.schedule.name"
SCHEDULE_DUE_AT: Final = "soniq.schedule.due_at"
"""The due time that fired, ISO 8601 in UTC."""
SCHEDULE_LATE_SECONDS: Final = "soniq.schedule.late_seconds"
SCHEDULE_CATCH_UP: Final = "soniq.schedule.catch_up"
SCHEDULE_SCHEDULER_ID: Final = "soniq.schedule.scheduler_id"
