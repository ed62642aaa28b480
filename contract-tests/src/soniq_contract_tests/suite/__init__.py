"""`BackendContractSuite`: every domain of the contract, one mixin per module, collected through one class.

A backend package runs it by subclassing and overriding one fixture::

    class TestMyBackend(BackendContractSuite):
        @pytest.fixture
        def soniq_backend_factory(self) -> BackendFactory:
            return UrlBackendFactory("mine://localhost")

The factory takes a namespace and returns an unconnected backend; the suite
connects it, runs `setup`, checks it is empty, and after the test runs
`close` (and `drop_schema` first, where the backend declares `SchemaAdmin`).
A test needing a role the backend does not declare is skipped ("<Backend>
does not declare <Role>"; `soniq_contract_tests.selection`), and the
terminal summary names the backend's roles and what was skipped. Every
test makes its own namespace, so the suite is safe in any order and under
pytest-xdist.

Optional fixtures a subclass may override (each says, when a test needs it
and it is missing, which one to override): `soniq_worker_url` (the URL a
`soniq worker` process opens, for the real-process scenarios; derived from a
`UrlBackendFactory`), `soniq_transaction` (a driver transaction, for the
transactional-enqueue contract), `soniq_unservable_worker` (a worker shape
`prepare_worker` must refuse) and `soniq_corrupt_row` (overwrites a row's
stored args with raw text, for the corrupt-row contract). The last two
default to what the backend's package registers in the entry-point group
``soniq_contract_tests.fixtures`` (`soniq_contract_tests.backend_fixtures`).
"""

from __future__ import annotations

import pytest

from soniq.backend import Backend, declared_roles
from soniq_contract_tests.backend_fixtures import CorruptRowWriter, TransactionFactory
from soniq_contract_tests.harness import BackendFactory, ContractHarness, fresh_namespace
from soniq_contract_tests.plugin import ROLE_REPORTS
from soniq_contract_tests.selection import (
    ROLE_MARK,
    RoleReport,
    missing_roles,
    not_declared_reason,
    roles_for_test,
)
from soniq_contract_tests.suite.cancel_running import CancelRunningContract
from soniq_contract_tests.suite.claim import ClaimContract
from soniq_contract_tests.suite.corrupt_rows import CorruptRowContract
from soniq_contract_tests.suite.dead_letter import DeadLetterContract
from soniq_contract_tests.suite.dead_letter_bulk import DeadLetterBulkContract
from soniq_contract_tests.suite.debounced_jobs import DebouncedJobContract
from soniq_contract_tests.suite.dedup import DedupContract
from soniq_contract_tests.suite.dependencies import DependencyContract
from soniq_contract_tests.suite.deploy_day import DeployDayContract
from soniq_contract_tests.suite.enqueue import EnqueueContract
from soniq_contract_tests.suite.error_text import ErrorTextContract
from soniq_contract_tests.suite.expire_unknown import ExpireUnknownJobsContract
from soniq_contract_tests.suite.fencing import FencingContract
from soniq_contract_tests.suite.fleet_processes import FleetProcessContract
from soniq_contract_tests.suite.job_changes import JobChangesContract
from soniq_contract_tests.suite.job_logs import JobLogContract
from soniq_contract_tests.suite.job_names import JobNamesContract
from soniq_contract_tests.suite.job_progress import JobProgressContract
from soniq_contract_tests.suite.job_steps import JobStepContract
from soniq_contract_tests.suite.job_versions import VersionedJobsContract
from soniq_contract_tests.suite.key_rotation import KeyRotationContract
from soniq_contract_tests.suite.leases import LeaseContract
from soniq_contract_tests.suite.limits import LimitContract
from soniq_contract_tests.suite.nack import NackContract
from soniq_contract_tests.suite.pruning import PruningContract
from soniq_contract_tests.suite.queue_pause import QueuePauseContract
from soniq_contract_tests.suite.read_bounds import ReadBoundsContract
from soniq_contract_tests.suite.reads import ReadsContract
from soniq_contract_tests.suite.recovery import StaleRecoveryContract
from soniq_contract_tests.suite.results_listing import ResultsListingContract
from soniq_contract_tests.suite.retention import RetentionContract
from soniq_contract_tests.suite.rolling_deploy import RollingDeployContract
from soniq_contract_tests.suite.schedules import ScheduleContract
from soniq_contract_tests.suite.scheduling import SchedulingContract
from soniq_contract_tests.suite.schema_setup import SchemaSetupContract
from soniq_contract_tests.suite.schema_status import SchemaStatusContract
from soniq_contract_tests.suite.settle import SettleContract
from soniq_contract_tests.suite.stats import QueueStatsContract
from soniq_contract_tests.suite.status_rule import StatusRuleContract
from soniq_contract_tests.suite.transactional_enqueue import TransactionalEnqueueContract
from soniq_contract_tests.suite.unique_windows import UniqueWindowContract
from soniq_contract_tests.suite.worker_processes import WorkerProcessContract
from soniq_contract_tests.suite.workers import PrepareWorkerContract, WaitForJobsContract, WorkerContract

__all__ = ["BackendContractSuite", "CorruptRowWriter", "TransactionFactory"]


class BackendContractSuite(
    NackContract,
    StaleRecoveryContract,
    FencingContract,
    ClaimContract,
    JobNamesContract,
    ExpireUnknownJobsContract,
    ResultsListingContract,
    CorruptRowContract,
    StatusRuleContract,
    DeadLetterContract,
    QueueStatsContract,
    SchedulingContract,
    EnqueueContract,
    TransactionalEnqueueContract,
    SettleContract,
    ErrorTextContract,
    WorkerContract,
    PrepareWorkerContract,
    WaitForJobsContract,
    WorkerProcessContract,
    ReadsContract,
    RollingDeployContract,
    SchemaStatusContract,
    DedupContract,
    RetentionContract,
    DeadLetterBulkContract,
    # -- schedules, leader lease, pruning
    ScheduleContract,
    LeaseContract,
    PruningContract,
    SchemaSetupContract,
    # -- dependencies, limits, cancelling running jobs, waiting for jobs
    DependencyContract,
    LimitContract,
    CancelRunningContract,
    JobChangesContract,
    FleetProcessContract,
    ReadBoundsContract,  # hostile ids, filters and limits on the app's reads
    # -- deploy day: queue pauses, resumable steps, job versions
    QueuePauseContract,
    JobStepContract,
    VersionedJobsContract,
    DeployDayContract,
    # -- progress and job logs
    JobProgressContract,
    JobLogContract,
    # -- unique windows and debounce
    UniqueWindowContract,
    DebouncedJobContract,
    # -- encryption: re-sealing stored values under a new key
    KeyRotationContract,
):
    """The whole backend contract. Subclass it and override `soniq_backend_factory`."""

    pytestmark = [pytest.mark.soniq_contract]

    heartbeat_timeout: float = 1.0
    """The `heartbeat_timeout` the recovery tests sweep with: silent workers go stale this fast.
    Live workers beat every 30 ms, so only a stall longer than this makes one look stale."""

    stale_deadline: float = 10.0
    """How long the recovery tests keep sweeping for a silent worker to be reported stale."""

    @pytest.fixture
    def soniq_backend_factory(self) -> BackendFactory:
        raise NotImplementedError(
            f"{type(self).__name__} must override the fixture soniq_backend_factory: return a callable "
            "taking a namespace (str) and returning an unconnected backend, e.g. "
            "soniq_contract_tests.UrlBackendFactory(URL) or functools.partial(MyBackend.from_url, URL)"
        )

    @pytest.fixture
    def contract(self, soniq_backend_factory: BackendFactory) -> ContractHarness:
        return ContractHarness(
            soniq_backend_factory, heartbeat_timeout=self.heartbeat_timeout, stale_deadline=self.stale_deadline
        )

    @pytest.fixture
    def soniq_backend_probe(self, soniq_backend_factory: BackendFactory) -> Backend:
        """A backend from the factory, never connected: what the suite asks before a test (its class,
        its capabilities) it asks this one."""
        return soniq_backend_factory(fresh_namespace())

    @pytest.fixture(autouse=True)
    def _soniq_declared_roles(self, request: pytest.FixtureRequest, soniq_backend_probe: Backend) -> None:
        """Skip a test that needs a role the backend does not declare (`soniq_contract_tests.selection`)."""
        marker = request.node.get_closest_marker(ROLE_MARK)
        function = request.function
        needed = roles_for_test(function.__module__, function.__name__, tuple(marker.args) if marker else None)
        name = type(soniq_backend_probe).__name__
        reports = request.config.stash.setdefault(ROLE_REPORTS, {})
        report = reports.get(name)
        if report is None:
            report = reports[name] = RoleReport(soniq_backend_probe.capabilities.describe_roles())
        if needed is None:
            return
        missing = missing_roles(needed, declared_roles(soniq_backend_probe))
        if missing:
            report.skipped.update(missing)
            pytest.skip(not_declared_reason(name, missing))
