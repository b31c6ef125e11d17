from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "webapp.jobs"
    label = "jobs"
    verbose_name = "Jobs"
