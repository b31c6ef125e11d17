from importlib import import_module

from django.apps import AppConfig

# The modules whose functions are job recorders (``webapp.jobs.recorders.register``).
RECORDER_MODULES = (
    "webapp.catalog.scrub",
    "webapp.catalog.services.annotation_groups",
    "webapp.catalog.services.annotations",
    "webapp.catalog.services.exports",
    "webapp.catalog.services.mixtures",
    "webapp.catalog.services.pools",
    "webapp.catalog.services.tokenized",
)


class CatalogConfig(AppConfig):
    name = "webapp.catalog"
    label = "catalog"
    verbose_name = "Catalog"

    def ready(self) -> None:
        """Register the catalog's job recorders in every process, worker included: a job
        names its recorder, and the worker that finishes it may have imported nothing else
        of the catalog."""
        for module in RECORDER_MODULES:
            import_module(module)
