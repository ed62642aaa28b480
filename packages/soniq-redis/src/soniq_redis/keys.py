"""Where Soniq's state lives in Redis: one key prefix per namespace.

Without a namespace every key starts with ``soniq:``; with one, with
``soniq:{<namespace>}:``. The braces make the namespace a Redis Cluster hash
tag (all of a namespace's keys hash to one slot, which multi-key scripts
need), and they keep namespaces apart: no default key starts with ``soniq:{``,
so dropping the default namespace never touches a named one.

On a Redis Cluster the default namespace needs a hash tag too: there it is
stored as the namespace ``default`` (prefix ``soniq:{default}:``). New keys
must be built from `KeySpace.prefix` (or `KeySpace.key`) so they stay in the
namespace's slot.
"""

from __future__ import annotations

from dataclasses import dataclass

BASE_PREFIX = "soniq:"
CLUSTER_DEFAULT_NAMESPACE = "default"
_GLOB_SPECIAL = frozenset("*?[]\\")


def escape_glob(text: str) -> str:
    """`text` as a literal inside a SCAN MATCH pattern."""
    return "".join("\\" + ch if ch in _GLOB_SPECIAL else ch for ch in text)


@dataclass(frozen=True, slots=True)
class KeySpace:
    """The key prefix of one namespace and the few keys Python touches directly
    (the Lua scripts build the rest from the same prefix)."""

    prefix: str
    namespace: str | None = None

    @classmethod
    def for_namespace(cls, namespace: str | None, *, cluster: bool = False) -> KeySpace:
        if namespace is None and cluster:
            namespace = CLUSTER_DEFAULT_NAMESPACE
        if namespace is None:
            return cls(prefix=BASE_PREFIX)
        if not isinstance(namespace, str) or not namespace:
            raise ValueError(f"namespace must be a non-empty string, got {namespace!r}")
        if "{" in namespace or "}" in namespace:
            raise ValueError(f"namespace must not contain '{{' or '}}', got {namespace!r}")
        return cls(prefix=f"{BASE_PREFIX}{{{namespace}}}:", namespace=namespace)

    def key(self, name: str) -> str:
        """Any key of this namespace: the prefix (and so the cluster hash slot) followed by `name`."""
        return f"{self.prefix}{name}"

    def job(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}"

    def dead(self, job_id: str) -> str:
        return f"{self.prefix}dead:{job_id}"

    def schedule(self, name: str) -> str:
        return f"{self.prefix}schedule:{name}"

    @property
    def paused_queues(self) -> str:
        """The hash of paused queues: queue name -> JSON ``{"reason", "paused_at"}``."""
        return f"{self.prefix}paused_queues"

    @property
    def schema(self) -> str:
        return f"{self.prefix}schema"

    @property
    def wakeup_channel(self) -> str:
        return f"{self.prefix}new_job"

    @property
    def changes_channel(self) -> str:
        """Where scripts publish the id of a watched row that finished, or of a cancel request."""
        return f"{self.prefix}job_changes"

    @property
    def scan_pattern(self) -> str:
        return escape_glob(self.prefix) + "*"

    def owns(self, key: str) -> bool:
        """Whether a key found by `scan_pattern` belongs to this namespace."""
        if not key.startswith(self.prefix):
            return False
        return self.namespace is not None or not key.startswith(BASE_PREFIX + "{")
