"""Security headers that depend on the deployment (see docs/reference/configuration.md): the
Content-Security-Policy header when ``SHARDYARD_CSP`` is on, and the login view that
answers 429 while a user name or address is throttled (``webapp.dashboard.throttle``)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views

from webapp.dashboard.throttle import client_address, login_throttled


class ContentSecurityPolicyMiddleware:
    """Adds ``settings.CSP_POLICY`` to every response (when set)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if settings.CSP_POLICY and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = settings.CSP_POLICY
        return response


class ThrottledLoginView(auth_views.LoginView):
    def post(self, request, *args, **kwargs):
        username = str(request.POST.get("username") or "")
        if login_throttled(username=username, address=client_address(request)):
            minutes = max(1, settings.LOGIN_WINDOW // 60)
            response = self.render_to_response(
                self.get_context_data(
                    form=self.get_form(),
                    throttled=f"Too many failed logins: try again in {minutes} minutes.",
                )
            )
            response.status_code = 429
            response["Retry-After"] = str(settings.LOGIN_WINDOW)
            return response
        return super().post(request, *args, **kwargs)
