"""The actions of ``manage.py catalog``: one class per action (its arguments and what it
does), grouped by what they act on. The command (``commands/catalog.py``) lists ``ACTIONS``,
parses, runs the one asked for and turns its refusal into one line.

An action's ``run`` returns the line it prints; it raises the services' errors unchanged.
"""

from __future__ import annotations

from webapp.catalog.management.actions import annotating, builds, jobs, runs, sources
from webapp.catalog.management.actions.base import Action

ACTIONS: dict[str, Action] = {
    a.name: a
    for a in (
        sources.SourceRegister(),
        sources.SourceScan(),
        builds.Tokenize(),
        builds.PoolBuild(),
        annotating.Annotate(),
        annotating.FlagWhere(),
        builds.MixtureVersionCreate(),
        builds.Materialize(),
        builds.Export(),
        runs.RunRegister(),
        runs.RunProgress(),
        runs.RunResume(),
        sources.Flag(),
        jobs.JobCancel(),
        jobs.JobRetry(),
        jobs.Scrub(),
        jobs.JobsReap(),
    )
}
