"""The documents a flag names, a run of them a row.

A flag over "the documents where ..." can name hundreds of millions of documents; one JSON
list on the flag's row would make that row gigabytes and every page listing flags read it.
Its document indices are stored here instead, sorted and in runs of up to
``webapp.catalog.flag_documents.RUN`` (delta-encoded, compressed: a few bytes a document),
each row with its first and last index and its count, so that a count below an index, a
page of them after an index, or all of them a run at a time are read by the index on
(flag, last). Written with the flag, in its transaction; deleted with it."""

from __future__ import annotations

from django.db import models


class FlagDocuments(models.Model):
    flag = models.ForeignKey("catalog.Flag", related_name="document_runs", on_delete=models.CASCADE)
    first = models.BigIntegerField()  # the smallest document index of the run
    last = models.BigIntegerField()  # the largest
    count = models.IntegerField()
    data = models.BinaryField()  # webapp.catalog.flag_documents.encode

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["flag", "first"], name="flag_documents_unique")
        ]
        # Runs are disjoint and sorted: ordered by last as by first, and "the runs past an
        # index" or "below one" is a range of this index.
        indexes = [models.Index(fields=["flag", "last"], name="flag_documents_last")]

    def __str__(self) -> str:
        return f"flag {self.flag_id}: {self.count} documents {self.first}..{self.last}"
