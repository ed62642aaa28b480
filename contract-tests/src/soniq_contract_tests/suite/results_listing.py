"""`JobPageParams.include_results`: listings leave results out unless asked; `get_job` always has it."""

from __future__ import annotations

from soniq.backend import JobPageParams
from soniq_contract_tests.harness import ContractHarness, complete_one, enqueue_and_claim, must_get

RESULT = {"rows": list(range(50)), "summary": "x" * 500}


class ResultsListingContract:
    async def test_job_page_leaves_results_out_unless_asked(self, contract: ContractHarness) -> None:
        async with contract.backend() as backend:
            row = await enqueue_and_claim(backend, worker_id="w1")
            assert await complete_one(backend, job_id=row.id, worker_id="w1", result=RESULT)
            (listed,) = (await backend.job_page(JobPageParams(queues=[row.queue]))).rows
            assert listed.id == row.id
            assert listed.result is None, "job_page without include_results must leave result as None"
            (with_results,) = (await backend.job_page(JobPageParams(queues=[row.queue], include_results=True))).rows
            assert with_results.result == RESULT
            assert (await must_get(backend, row.id)).result == RESULT
            # Nothing else differs between the two listings.
            assert {**listed.to_dict(), "result": RESULT} == with_results.to_dict()
