"""`soniq.backend.rules`: the dependency cascade, limit groups and rate windows every backend applies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from soniq.backend import rules
from soniq.backend.rules import DependencyState, DependentAction, LimitGroup
from soniq.params import GroupLimit, LimitScope
from soniq.records import DependencyPolicy, JobStatus

CANCEL, RUN = DependencyPolicy.CANCEL, DependencyPolicy.RUN
PENDING, DONE = DependencyState.PENDING, DependencyState.DONE
CANCELLED, DEAD, DELETED = DependencyState.CANCELLED, DependencyState.DEAD_LETTERED, DependencyState.DELETED

# -- dependency_failed_error ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("how", "text"),
    [
        (CANCELLED, "dependency job-1 was cancelled"),
        (DEAD, "dependency job-1 was dead-lettered"),
        (DELETED, "dependency job-1 was deleted"),
        ("dead-lettered", "dependency job-1 was dead-lettered"),
    ],
)
def test_dependency_failed_error_is_the_exact_text(how: DependencyState | str, text: str) -> None:
    assert rules.dependency_failed_error("job-1", how) == text


@pytest.mark.parametrize("how", [PENDING, DONE, "done"])
def test_dependency_failed_error_refuses_a_dependency_that_did_not_fail(how: DependencyState | str) -> None:
    with pytest.raises(ValueError, match="did not fail"):
        rules.dependency_failed_error("job-1", how)


def test_the_failures_are_exactly_the_failed_states() -> None:
    assert set(rules.FAILURES) == {state for state in DependencyState if state.failed}
    assert not PENDING.finished
    assert all(state.finished for state in DependencyState if state is not PENDING)


@pytest.mark.parametrize(
    ("status", "state"),
    [("queued", PENDING), ("processing", PENDING), ("done", DONE), (JobStatus.CANCELLED, CANCELLED)],
)
def test_state_of_row(status: JobStatus | str, state: DependencyState) -> None:
    assert rules.state_of_row(status) is state


# -- plan_insert -------------------------------------------------------------------------


def test_plan_insert_without_dependencies_is_a_plain_queued_row() -> None:
    plan = rules.plan_insert(CANCEL, [])
    assert plan == rules.InsertPlan(JobStatus.QUEUED, 0, ())
    assert not plan.cancelled


def test_plan_insert_waits_for_pending_dependencies_only() -> None:
    plan = rules.plan_insert(CANCEL, [("a", DONE), ("b", PENDING), ("c", PENDING)])
    assert (plan.status, plan.waiting_on, plan.pending, plan.last_error) == (JobStatus.QUEUED, 2, ("b", "c"), None)


def test_plan_insert_counts_a_dependency_named_twice_once() -> None:
    plan = rules.plan_insert(RUN, [("b", PENDING), ("a", PENDING), ("b", PENDING)])
    assert (plan.waiting_on, plan.pending) == (2, ("b", "a"))


def test_plan_insert_cancels_under_policy_cancel_naming_the_first_failed_dependency() -> None:
    plan = rules.plan_insert("cancel", [("a", PENDING), ("b", DEAD), ("c", CANCELLED)])
    assert plan.cancelled
    assert (plan.waiting_on, plan.pending, plan.last_error) == (0, (), "dependency b was dead-lettered")


def test_plan_insert_counts_a_failed_dependency_as_resolved_under_policy_run() -> None:
    plan = rules.plan_insert(RUN, [("a", PENDING), ("b", CANCELLED), ("c", DONE)])
    assert (plan.status, plan.waiting_on, plan.pending, plan.last_error) == (JobStatus.QUEUED, 1, ("a",), None)


_ids = st.sampled_from(["a", "b", "c", "d", "e"])
_states = st.sampled_from(list(DependencyState))
_policies = st.sampled_from(list(DependencyPolicy))


@given(_policies, st.lists(st.tuples(_ids, _states), max_size=12))
def test_plan_insert_properties(policy: DependencyPolicy, given_states: list[tuple[str, DependencyState]]) -> None:
    plan = rules.plan_insert(policy, given_states)
    pending = list(dict.fromkeys(dep for dep, state in given_states if state is PENDING))
    failed = [(dep, state) for dep, state in given_states if state.failed]
    if failed and policy is CANCEL:
        assert plan == rules.InsertPlan(JobStatus.CANCELLED, 0, (), rules.dependency_failed_error(*failed[0]))
    else:
        assert plan == rules.InsertPlan(JobStatus.QUEUED, len(pending), tuple(pending))


# -- on_dependency_finished ----------------------------------------------------------------


@pytest.mark.parametrize("policy", [CANCEL, RUN])
def test_a_done_dependency_counts_down_under_either_policy(policy: DependencyPolicy) -> None:
    update = rules.on_dependency_finished(policy, DONE, "a", status=JobStatus.QUEUED, waiting_on=2)
    assert update == rules.DependentUpdate(DependentAction.COUNT_DOWN, 1)
    assert (update.released, update.cancelled) == (False, False)
    last = rules.on_dependency_finished(policy, "done", "a", status="queued", waiting_on=1)
    assert (last.waiting_on, last.released) == (0, True)


@pytest.mark.parametrize("how", rules.FAILURES)
def test_a_failed_dependency_cancels_under_policy_cancel_with_the_text(how: DependencyState) -> None:
    update = rules.on_dependency_finished(CANCEL, how, "dep-9", status=JobStatus.QUEUED, waiting_on=3)
    assert update == rules.DependentUpdate(DependentAction.CANCEL, 0, rules.dependency_failed_error("dep-9", how))
    assert (update.cancelled, update.released) == (True, False)


@pytest.mark.parametrize("how", rules.FAILURES)
def test_a_failed_dependency_counts_down_under_policy_run(how: DependencyState) -> None:
    update = rules.on_dependency_finished(RUN, how, "dep-9", status=JobStatus.QUEUED, waiting_on=1)
    assert update == rules.DependentUpdate(DependentAction.COUNT_DOWN, 0)
    assert update.released


@pytest.mark.parametrize(
    ("status", "waiting_on"),
    [(JobStatus.QUEUED, 0), (JobStatus.PROCESSING, 1), (JobStatus.DONE, 1), (JobStatus.CANCELLED, 2)],
)
@pytest.mark.parametrize("how", [DONE, *rules.FAILURES])
def test_a_row_not_waiting_is_left_alone(status: JobStatus, waiting_on: int, how: DependencyState) -> None:
    update = rules.on_dependency_finished(CANCEL, how, "a", status=status, waiting_on=waiting_on)
    assert update == rules.DependentUpdate(DependentAction.LEAVE, waiting_on)


def test_a_pending_dependency_has_not_finished() -> None:
    with pytest.raises(ValueError, match="not finished"):
        rules.on_dependency_finished(CANCEL, PENDING, "a", status=JobStatus.QUEUED, waiting_on=1)


def test_policies_cancelled_by() -> None:
    assert rules.policies_cancelled_by(DONE) == ()
    for how in rules.FAILURES:
        assert rules.policies_cancelled_by(how) == (CANCEL,)


# -- group_of -----------------------------------------------------------------------------


def _limit(scope: LimitScope, name: str, *, partitioned: bool = False) -> GroupLimit:
    return GroupLimit(scope, name, max_concurrent=1, partitioned=partitioned)


def test_a_queue_limit_groups_the_rows_of_its_queue_whatever_their_name_and_key() -> None:
    limit = _limit(LimitScope.QUEUE, "emails")
    whole = LimitGroup("queue:emails", False)
    assert rules.group_of(limit, queue="emails", job_name="a", limit_key="k1") == whole
    assert rules.group_of(limit, queue="emails", job_name="b", limit_key=None) == whole
    assert rules.group_of(limit, queue="other", job_name="a", limit_key="k1") is None


def test_a_job_limit_matches_by_job_name_only() -> None:
    limit = _limit(LimitScope.JOB, "send")
    assert rules.group_of(limit, queue="q1", job_name="send", limit_key=None) == LimitGroup("job:send", False)
    assert rules.group_of(limit, queue="q2", job_name="send", limit_key="x") == LimitGroup("job:send", False)
    assert rules.group_of(limit, queue="send", job_name="other", limit_key=None) is None


def test_a_partitioned_limit_groups_per_limit_key_and_the_keyless_rows_together() -> None:
    limit = _limit(LimitScope.JOB, "send", partitioned=True)
    a = rules.group_of(limit, queue="q", job_name="send", limit_key="a")
    a_again = rules.group_of(limit, queue="other", job_name="send", limit_key="a")
    b = rules.group_of(limit, queue="q", job_name="send", limit_key="b")
    none = rules.group_of(limit, queue="q", job_name="send", limit_key=None)
    assert a == a_again == LimitGroup("job:send", True, "a")
    assert none == LimitGroup("job:send", True, None)
    assert len({a, b, none}) == 3


_text = st.text(min_size=0, max_size=6)


@given(
    st.sampled_from(list(LimitScope)),
    _text,
    st.booleans(),
    st.tuples(_text, _text, st.none() | _text),
    st.tuples(_text, _text, st.none() | _text),
)
def test_group_of_properties(
    scope: LimitScope,
    name: str,
    partitioned: bool,
    row: tuple[str, str, str | None],
    other: tuple[str, str, str | None],
) -> None:
    limit = _limit(scope, name, partitioned=partitioned)
    subject = 0 if scope is LimitScope.QUEUE else 1
    group = rules.group_of(limit, queue=row[0], job_name=row[1], limit_key=row[2])
    other_group = rules.group_of(limit, queue=other[0], job_name=other[1], limit_key=other[2])
    assert (group is None) == (row[subject] != name)
    if group is not None:
        assert (group.limit, group.partitioned) == (limit.key, partitioned)
        assert group.limit_key == (row[2] if partitioned else None)
    if group is not None and other_group is not None:
        assert (group == other_group) == (not partitioned or row[2] == other[2])


# -- window_start -------------------------------------------------------------------------


def test_window_start_examples() -> None:
    now = datetime(2024, 5, 1, 12, 0, 7, 250_000, tzinfo=UTC)
    assert rules.window_start(now, 1.0) == datetime(2024, 5, 1, 12, 0, 7, tzinfo=UTC)
    assert rules.window_start(now, 5.0) == datetime(2024, 5, 1, 12, 0, 5, tzinfo=UTC)
    assert rules.window_start(now, 60.0) == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert rules.window_start(now, 0.1) == datetime(2024, 5, 1, 12, 0, 7, 200_000, tzinfo=UTC)
    assert rules.window_start(now, 86_400.0) == datetime(2024, 5, 1, tzinfo=UTC)
    # Another UTC offset names the same moment: the same window.
    assert rules.window_start(now.astimezone(timezone(timedelta(hours=5, minutes=30))), 60.0) == rules.window_start(
        now, 60.0
    )


def test_window_start_refuses_a_naive_datetime_and_a_bad_period() -> None:
    with pytest.raises(ValueError, match="aware"):
        rules.window_start(datetime(2024, 5, 1), 1.0)
    for period in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="positive"):
            rules.window_start_us(0, period)


_periods_ms = st.integers(min_value=1, max_value=30 * 86_400_000)
_moments_us = st.integers(min_value=-(10**15), max_value=4_102_444_800 * 10**6)  # to the year 2100


@given(_moments_us, _periods_ms)
def test_window_start_us_contains_now_and_is_aligned(now_us: int, period_ms: int) -> None:
    period = period_ms / 1000
    period_us = period_ms * 1000
    start = rules.window_start_us(now_us, period)
    assert rules.rate_period_us(period) == period_us
    assert start <= now_us < start + period_us
    assert start % period_us == 0


@given(
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)), _periods_ms
)
def test_window_start_contains_now_and_is_aligned(now: datetime, period_ms: int) -> None:
    period = period_ms / 1000
    start = rules.window_start(now, period)
    assert start.tzinfo is not None
    assert start <= now < start + timedelta(milliseconds=period_ms)
    assert rules.epoch_us(start) % (period_ms * 1000) == 0
    # Every moment of the window falls in the same window.
    assert rules.window_start(start, period) == start
    assert rules.window_start(start + timedelta(milliseconds=period_ms) - timedelta(microseconds=1), period) == start
