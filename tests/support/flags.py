"""What a worker does after a flag is recorded, run in the test's process: the task that
computes and stores what the flag taints (``workers.flag_taint``)."""

from __future__ import annotations


def taint_computed(flag_id: int) -> None:
    """Run ``workers.flag_taint`` for the flag (as a worker would once the flag's
    transaction committed) and check it stored the taint."""
    from webapp.catalog.models import Flag
    from workers.tasks import flag_taint

    assert flag_taint.apply(kwargs={"flag_id": flag_id}).get() == Flag.TaintState.READY
    assert Flag.objects.get(pk=flag_id).taint_state == Flag.TaintState.READY
