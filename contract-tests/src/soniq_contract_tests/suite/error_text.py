"""The error text a worker stores (`last_error`): its summary line, then a multi-line traceback.

Core builds the text (at most 8192 characters); the store keeps it byte for byte through the retry
write, the dead-letter move and every read, so an operator sees the same traceback on every backend.
The real-process scenario checks the text a real `soniq worker` stored: it starts at the handler's
own frame, and no line repeats the summary.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from soniq.backend import (
    Backend,
    ClaimJobsParams,
    DeadLetterJobParams,
    DeadLetterPageParams,
    DeadLetterRecord,
    GetDeadLetterParams,
    JobPageParams,
    JobRecord,
    RetryJobParams,
)
from soniq_contract_tests.harness import ContractHarness, enqueue_and_claim, must_get, utc_now
from soniq_contract_tests.process_harness import Scenario, wait_for
from soniq_contract_tests.suite.worker_processes import worker_process

TRACEBACK = (
    "LookupError: customer 7 not found \u2014 \u00abd\u00e9j\u00e0 vu\u00bb \U0001f680\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/app/jobs.py", line 12, in send_invoice\n'
    "    load_customer(customer_id)\n"
    '  File "/srv/app/jobs.py", line 5, in load_customer\n'
    '\traise LookupError(f"customer {customer_id} not found")\r\n'
    "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    "\n"
    "The above exception was the direct cause of the following exception:\n"
    "\n"
    "  quotes \"double\" and 'single', a backslash \\ and \\n written out, %s {} $1 -- ; '); DROP TABLE x;--"
)
"""A traceback with what a store could mangle: line breaks (one CRLF), a tab, quotes, a backslash,
format and SQL characters, and characters of two, three and four bytes in UTF-8."""

LONGEST = ("\U0001f680 frame line \u00e9\n" * 1000)[:8192]
"""As long as core ever writes (8192 characters), four-byte characters included: 22,000 bytes or so."""


def _due() -> datetime:
    return utc_now() - timedelta(seconds=1)


async def _list_row(backend: Backend, row: JobRecord) -> JobRecord:
    page = await backend.job_page(JobPageParams(queues=[row.queue], search=row.id, limit=10))
    [listed] = [r for r in page.rows if r.id == row.id]
    return listed


async def _dead_row(backend: Backend, job_id: str, queue: str) -> tuple[DeadLetterRecord, DeadLetterRecord]:
    got = await backend.get_dead_letter(GetDeadLetterParams(job_id=job_id))
    assert got is not None
    page = await backend.dead_letter_page(DeadLetterPageParams(queues=[queue], search=job_id, limit=10))
    [listed] = [r for r in page.rows if r.id == job_id]
    return got, listed


class ErrorTextContract:
    async def test_retry_keeps_a_multi_line_traceback_byte_for_byte(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            for text in (TRACEBACK, LONGEST):
                claimed = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
                assert await backend.retry_job(
                    RetryJobParams(job_id=claimed.id, worker_id="w1", error=text, scheduled_at=_due())
                )
                assert (await must_get(backend, claimed.id)).last_error == text
                assert (await _list_row(backend, claimed)).last_error == text

    async def test_the_dead_letter_move_keeps_the_traceback_byte_for_byte(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            for text in (TRACEBACK, LONGEST):
                claimed = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
                assert await backend.dead_letter_job(
                    DeadLetterJobParams(job_id=claimed.id, worker_id="w1", error=text, reason="max_attempts")
                )
                got, listed = await _dead_row(backend, claimed.id, claimed.queue)
                assert (got.last_error, listed.last_error) == (text, text)

    async def test_the_dead_letter_row_holds_the_last_runs_traceback(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            claimed = await enqueue_and_claim(backend, worker_id="w1", mark_started=True)
            assert await backend.retry_job(
                RetryJobParams(job_id=claimed.id, worker_id="w1", error="first run\nits frames", scheduled_at=_due())
            )
            again = await enqueue_and_claim_again(backend, claimed)
            assert again.last_error == "first run\nits frames"
            assert await backend.dead_letter_job(
                DeadLetterJobParams(job_id=claimed.id, worker_id="w2", error=TRACEBACK, reason="max_attempts")
            )
            got, listed = await _dead_row(backend, claimed.id, claimed.queue)
            assert (got.last_error, listed.last_error, got.attempts) == (TRACEBACK, TRACEBACK, 2)

    @worker_process
    def test_a_real_worker_stores_the_traceback_from_the_handlers_frame(self, scenario: Scenario) -> None:
        job_id = scenario.enqueue("ct.fail_deep", tag="tb", customer=7)
        scenario.start_worker()
        dead = wait_for(lambda: scenario.dead_letter(job_id), timeout=20, what="the failing job to be dead-lettered")
        lines = str(dead["last_error"]).splitlines()
        assert lines[0] == "LookupError: customer 7 not found"
        assert lines[1] == "Traceback (most recent call last):"
        assert lines[2].endswith(", in fail_deep")
        assert "worker_jobs.py" in lines[2]
        assert lines[-2].endswith(", in look_up")
        assert lines[-1].strip() == 'raise LookupError(f"customer {customer} not found")'
        assert not any("soniq/worker" in line or "asyncio" in line for line in lines)
        assert len(lines) == len(set(lines)), lines  # the summary is not repeated at the end


async def enqueue_and_claim_again(backend: Backend, row: JobRecord) -> JobRecord:
    """Claim `row` (queued again after a retry) for worker ``w2``; returns it as stored."""
    claimed = await backend.claim_jobs(ClaimJobsParams(worker_id="w2", queues=[row.queue], limit=1, mark_started=True))
    assert [r.id for r in claimed] == [row.id]
    return await must_get(backend, row.id)
