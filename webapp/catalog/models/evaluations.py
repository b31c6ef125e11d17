"""Evaluation results a trainer reports for a run (a benchmark's score at a step), each
read beside what the run could have seen of that benchmark: a result is marked "possibly
contaminated" while a contamination flag of its benchmark taints the run
(``webapp.catalog.selectors.decon``)."""

from __future__ import annotations

from django.db import models


class RunEvaluation(models.Model):
    run = models.ForeignKey(
        "catalog.TrainingRun", related_name="evaluations", on_delete=models.CASCADE
    )
    benchmark = models.CharField(max_length=100)  # a benchmark spec's name
    metric = models.CharField(max_length=100, default="score")
    step = models.BigIntegerField(default=0)
    value = models.FloatField()
    reported_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # A retried report records nothing twice.
            models.UniqueConstraint(
                fields=["run", "benchmark", "metric", "step"], name="run_evaluation_once"
            )
        ]
        ordering = ["run", "benchmark", "metric", "step"]

    def __str__(self) -> str:
        return f"{self.run_id} {self.benchmark}/{self.metric} @ {self.step}: {self.value}"
