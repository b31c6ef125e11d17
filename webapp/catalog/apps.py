from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "webapp.catalog"
    label = "catalog"
    verbose_name = "Catalog"
