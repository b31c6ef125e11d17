from django.contrib import admin

from webapp.ops.models import Heartbeat


@admin.register(Heartbeat)
class HeartbeatAdmin(admin.ModelAdmin):
    list_display = ("worker", "broker", "created_at")
