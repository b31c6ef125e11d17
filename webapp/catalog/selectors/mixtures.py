"""Mixtures and their versions: the builder's pools and its prediction for a draft."""

from __future__ import annotations

from webapp.catalog import builder
from webapp.catalog.models import ArtifactStatus, Mixture, Pool

BUILDER_POOLS = 500


def builder_pools() -> list[dict]:
    """Ready training pools the builder offers, newest first, as plain facts."""
    return list(
        Pool.objects.filter(status=ArtifactStatus.READY, split=Pool.Split.TRAIN)
        .order_by("-created_at")
        .values("id", "name", "num_records", "num_tokens", "seq_len", "path")[:BUILDER_POOLS]
    )


def mixture_names(*, limit: int = 500) -> list[str]:
    return list(Mixture.objects.order_by("name").values_list("name", flat=True)[:limit])


def mixture_draft_predict(*, payload: dict) -> dict:
    """What a draft (the builder's rows, stages and settings) would build: ``{error,
    spec, rows (per pool: tokens, epochs), warnings, schedule (per stage), save_error}``.
    ``save_error`` says why it cannot be saved (a pool repeated beyond the cap: the build
    would fail); ``error`` alone when the rows do not make a spec or cannot be planned."""
    try:
        spec = builder.spec_from_draft(payload)
    except builder.BuilderError as e:
        return {"error": str(e)}
    ids = {int(r["pool"]) for r in payload.get("rows") or [] if str(r.get("pool", "")).isdigit()}
    pools = {
        p["id"]: p
        for p in Pool.objects.filter(pk__in=ids, status=ArtifactStatus.READY).values(
            "id", "name", "num_records", "seq_len", "path"
        )
    }
    result = builder.predict(spec, pools)
    if result.get("error"):
        return {"error": result["error"], "spec": spec}
    return {
        "error": None,
        "spec": spec,
        "rows": result["rows"],
        "warnings": result["warnings"],
        "schedule": result["schedule"],
        "save_error": (
            f"{', '.join(result['over_cap'])} above max_repetitions={spec['max_repetitions']:g}"
            if result["over_cap"]
            else None
        ),
    }
