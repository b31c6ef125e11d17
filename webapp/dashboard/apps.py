from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "webapp.dashboard"
    label = "dashboard"

    def ready(self) -> None:
        from webapp.dashboard import throttle  # noqa: F401 - connects the login signals
