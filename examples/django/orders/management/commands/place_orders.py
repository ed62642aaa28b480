"""Enqueue a few tasks the way a view would, inside and outside transaction.atomic()."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction
from django.tasks.exceptions import TaskResultDoesNotExist

from orders.tasks import send_receipt, total


class Command(BaseCommand):
    help = "Enqueue sample tasks; run `soniq_worker --run-once`, then `place_orders --results ID...`."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--results", nargs="*", help="print the results of these task ids")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["results"] is not None:
            for result_id in options["results"]:
                try:
                    result = total.get_backend().get_result(result_id)
                except TaskResultDoesNotExist:
                    self.stdout.write(f"{result_id}: never existed")
                    continue
                value = result.return_value if result.status == "SUCCESSFUL" else None
                self.stdout.write(f"{result_id}: {result.task.name} {result.status} {value!r}")
            return
        summed = total.enqueue([9.99, 5.01])
        with transaction.atomic():
            # Committed with the order: the worker sees it only after the commit.
            receipt = send_receipt.enqueue("order-1", email="ada@example.com")
        try:
            with transaction.atomic():
                rolled_back = send_receipt.enqueue("order-2", email="bob@example.com")
                raise RuntimeError("payment declined")
        except RuntimeError:
            pass
        self.stdout.write(" ".join([summed.id, receipt.id, rolled_back.id]))
