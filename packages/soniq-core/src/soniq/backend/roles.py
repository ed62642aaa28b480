"""Which roles core knows, which a backend declares, and the check a feature makes before it
uses an optional one."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from soniq.backend import (
    cancel_channel,
    dead_letter_store,
    debounced_jobs,
    dependency_store,
    job_log_store,
    job_progress_store,
    job_step_store,
    key_rotation_store,
    limit_store,
    operator_reads,
    queue_pause_store,
    queue_store,
    retention_store,
    schedule_store,
    schema_admin,
    unique_windows,
    versioned_jobs,
)
from soniq.errors import BackendProtocolError, MissingBackendRoleError

R = TypeVar("R")

MIGRATION_NOTE = "docs/backends/authoring.md, section 'Migrating from protocol 4'"


@dataclass(frozen=True, slots=True)
class Role:
    """One role: its protocol class and the version of it this soniq-core speaks."""

    protocol: type[Any]
    version: int

    @property
    def name(self) -> str:
        return self.protocol.__name__

    def methods(self) -> list[str]:
        """The names a backend that fills this role must provide."""
        own = self.protocol.__dict__
        return sorted(
            name
            for name, value in own.items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))
        )


ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role(queue_store.QueueStore, queue_store.VERSION),
        Role(dead_letter_store.DeadLetterStore, dead_letter_store.VERSION),
        Role(schedule_store.ScheduleStore, schedule_store.VERSION),
        Role(operator_reads.OperatorReads, operator_reads.VERSION),
        Role(schema_admin.SchemaAdmin, schema_admin.VERSION),
        Role(cancel_channel.CancelChannel, cancel_channel.VERSION),
        Role(limit_store.LimitStore, limit_store.VERSION),
        Role(dependency_store.DependencyStore, dependency_store.VERSION),
        Role(retention_store.RetentionStore, retention_store.VERSION),
        Role(queue_pause_store.QueuePauseStore, queue_pause_store.VERSION),
        Role(job_step_store.JobStepStore, job_step_store.VERSION),
        Role(versioned_jobs.VersionedJobs, versioned_jobs.VERSION),
        Role(job_progress_store.JobProgressStore, job_progress_store.VERSION),
        Role(job_log_store.JobLogStore, job_log_store.VERSION),
        Role(unique_windows.UniqueWindows, unique_windows.VERSION),
        Role(debounced_jobs.DebouncedJobs, debounced_jobs.VERSION),
        Role(key_rotation_store.KeyRotationStore, key_rotation_store.VERSION),
    )
}
"""Every role this soniq-core knows, by name, the required `QueueStore` first."""


def backend_name(backend: object) -> str:
    kind = type(backend)
    return f"{kind.__module__}.{kind.__qualname__}"


def declared_roles(backend: object) -> dict[str, int]:
    """The roles the backend declares, as ``{name: version}``."""
    capabilities = getattr(backend, "capabilities", None)
    roles = getattr(capabilities, "roles", None) or {}
    return dict(roles)


def has_role(backend: object, protocol: type[Any]) -> bool:
    """Whether the backend declares the role (checked at construction, so a declared role is
    one this soniq-core speaks and whose methods the backend has)."""
    return protocol.__name__ in declared_roles(backend)


def require_role(backend: object, protocol: type[R], feature: str) -> R:
    """The backend as the role `protocol`, or `MissingBackendRoleError` naming the feature,
    the role and the backend when it does not declare that role."""
    role = protocol.__name__
    declared = declared_roles(backend)
    if role not in declared:
        listed = ", ".join(f"{name} v{version}" for name, version in declared.items()) or "nothing"
        raise MissingBackendRoleError(
            f"{feature} needs the backend role {role}, which {backend_name(backend)} does not fill "
            f"(it declares: {listed})",
            feature=feature,
            role=role,
            backend=backend_name(backend),
        )
    return cast(R, backend)


def check_backend(backend: object) -> None:
    """Refuse, at construction, a backend that cannot serve: no `QueueStore`, a role version this
    soniq-core does not speak, or a declared role whose methods are missing."""
    name = backend_name(backend)
    capabilities = getattr(backend, "capabilities", None)
    legacy = getattr(capabilities, "protocol_version", None)
    declared = declared_roles(backend)
    if legacy is not None and legacy <= 4:
        raise BackendProtocolError(
            f"{name} implements the single backend protocol {legacy}; this soniq-core speaks protocols by "
            f"role (QueueStore v{queue_store.VERSION} and optional roles). Port it: see {MIGRATION_NOTE}"
        )
    if "QueueStore" not in declared:
        raise BackendProtocolError(
            f"{name} does not declare the required role QueueStore in capabilities.roles; see {MIGRATION_NOTE}"
        )
    for role_name, version in declared.items():
        role = ROLES.get(role_name)
        if role is None:
            continue  # a role from a newer soniq-core: nothing here will ask for it
        if version != role.version:
            newer = "upgrade soniq-core" if version > role.version else "upgrade the backend"
            raise BackendProtocolError(
                f"{name} implements {role_name} v{version}, but this soniq-core speaks {role_name} "
                f"v{role.version}; {newer}"
            )
        missing = [method for method in role.methods() if not _provides(backend, method)]
        if missing:
            raise BackendProtocolError(
                f"{name} declares {role_name} v{version} but lacks {', '.join(missing)}; see {MIGRATION_NOTE}"
            )


def _provides(backend: object, method: str) -> bool:
    if method == "capabilities":
        return hasattr(backend, "capabilities")
    value = inspect.getattr_static(backend, method, None)
    return value is not None and callable(getattr(backend, method, None))
