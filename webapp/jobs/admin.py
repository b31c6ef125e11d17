from django.contrib import admin

from webapp.jobs.models import Job, JobUnit


class JobUnitInline(admin.TabularInline):
    model = JobUnit
    extra = 0
    fields = ("unit_id", "phase", "state", "attempts", "worker", "started_at", "finished_at")
    readonly_fields = fields
    can_delete = False
    show_change_link = True


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "title", "state", "units_done", "units_total", "created_at")
    list_filter = ("state", "kind")
    search_fields = ("title", "output_dir")
    readonly_fields = ("plan", "bad_input", "log_tail")
    exclude = ()
    inlines = [JobUnitInline]


@admin.register(JobUnit)
class JobUnitAdmin(admin.ModelAdmin):
    list_display = ("id", "job", "unit_id", "phase", "state", "attempts", "worker")
    list_filter = ("state",)
    search_fields = ("unit_id", "worker")
    raw_id_fields = ("job",)
