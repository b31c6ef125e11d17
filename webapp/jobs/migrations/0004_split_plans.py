"""Existing jobs' plans are split: their units get their specs and positions, their
``plan`` loses ``phases`` (step 2 of 3; a migration of its own so that its row updates
commit before the constraints of step 3 are added)."""

from django.db import migrations


def split_plans(apps, schema_editor) -> None:
    Job = apps.get_model("jobs", "Job")
    JobUnit = apps.get_model("jobs", "JobUnit")
    for job in Job.objects.order_by("pk").iterator(chunk_size=50):
        plan = dict(job.plan or {})
        specs = {}
        for phase in plan.pop("phases", None) or []:
            for spec in phase:
                specs[str(spec.get("id"))] = spec
        rows = list(JobUnit.objects.filter(job_id=job.pk).order_by("phase", "pk"))
        for index, unit in enumerate(rows):
            unit.index = index
            unit.spec = specs.get(unit.unit_id) or {"id": unit.unit_id}
            bad = (unit.stats or {}).get("bad_lines")
            if bad is None:
                bad = sum(
                    int(r.get("count", 0))
                    for f in ((unit.stats or {}).get("bad_input") or {}).values()
                    if isinstance(f, dict)
                    for r in f.values()
                    if isinstance(r, dict)
                )
            unit.bad_lines = int(bad or 0)
        JobUnit.objects.bulk_update(rows, ["index", "spec", "bad_lines"], batch_size=1000)
        left = sum(1 for u in rows if u.phase == job.phase and u.state != "succeeded")
        Job.objects.filter(pk=job.pk).update(plan=plan, phase_left=left)


def unsplit_plans(apps, schema_editor) -> None:
    Job = apps.get_model("jobs", "Job")
    JobUnit = apps.get_model("jobs", "JobUnit")
    for job in Job.objects.order_by("pk").iterator(chunk_size=50):
        phases: list[list] = [[] for _ in range(job.num_phases)]
        for phase, spec in (
            JobUnit.objects.filter(job_id=job.pk).order_by("index").values_list("phase", "spec")
        ):
            while len(phases) <= phase:
                phases.append([])
            phases[phase].append(spec)
        Job.objects.filter(pk=job.pk).update(plan={**(job.plan or {}), "phases": phases})


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0003_units_carry_their_spec"),
    ]

    operations = [migrations.RunPython(split_plans, unsplit_plans)]
