from django.urls import path

from webapp.dashboard.views import (
    annotations,
    audit,
    builder,
    catalog,
    decon,
    jobs,
    overview,
    users,
)

app_name = "dashboard"

urlpatterns = [
    path("sources/", catalog.source_list, name="sources"),
    path("sources/register/", catalog.source_register, name="source_register"),
    path("sources/<int:source_id>/", catalog.source_detail, name="source"),
    path("sources/<int:source_id>/scan/", catalog.source_scan, name="source_scan"),
    path("sources/<int:source_id>/tokenize/", catalog.source_tokenize, name="source_tokenize"),
    path("tokenized/<int:tokenized_id>/annotate/", annotations.annotate, name="annotate"),
    path("annotations/near-duplicates/", annotations.annotate_group, name="annotate_group"),
    path("annotations/<int:annotation_id>/", annotations.annotation_detail, name="annotation"),
    path(
        "annotations/<int:annotation_id>/flag/",
        annotations.annotation_flag_where,
        name="annotation_flag_where",
    ),
    path("pools/", catalog.pool_list, name="pools"),
    path("pools/build/", catalog.pool_build, name="pool_build"),
    path("pools/<int:pool_id>/", catalog.pool_detail, name="pool"),
    path("mixtures/", catalog.mixture_list, name="mixtures"),
    path("mixtures/<int:mixture_id>/", catalog.mixture_detail, name="mixture"),
    path("mixtures/new/", builder.mixture_builder, name="mixture_builder"),
    path("mixtures/new/predict.json", builder.mixture_predict, name="mixture_predict"),
    path("mixtures/new/save/", builder.mixture_save, name="mixture_save"),
    path("mixtures/versions/<int:version_id>/", catalog.mixture_version, name="mixture_version"),
    path(
        "mixtures/versions/<int:a_id>/diff/<int:b_id>/",
        catalog.mixture_version_diff,
        name="mixture_version_diff",
    ),
    path("mixtures/<int:mixture_id>/diff/", catalog.mixture_diff_pick, name="mixture_diff_pick"),
    path(
        "mixtures/versions/<int:version_id>/materialize/",
        catalog.mixture_version_materialize,
        name="mixture_version_materialize",
    ),
    path(
        "mixtures/versions/<int:version_id>/version.json",
        catalog.mixture_version_json,
        name="mixture_version_json",
    ),
    path(
        "mixtures/versions/<int:version_id>/export/<slug:fmt>/",
        catalog.mixture_version_export,
        name="mixture_version_export",
    ),
    path("exports/<int:export_id>/download/", catalog.export_download, name="export_download"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/<int:job_id>/", jobs.job_detail, name="job"),
    path("jobs/<int:job_id>/progress.json", jobs.job_progress, name="job_progress"),
    path("jobs/<int:job_id>/cancel/", jobs.job_cancel, name="job_cancel"),
    path("jobs/<int:job_id>/retry/", jobs.job_retry, name="job_retry"),
    path("runs/", catalog.run_list, name="runs"),
    path("runs/<int:run_id>/", catalog.run_detail, name="run"),
    path("runs/<int:run_id>/switch/", catalog.run_switch, name="run_switch"),
    path("audit/", audit.audit, name="audit"),
    path("audit/flags/", audit.flag_create, name="flag_create"),
    path("audit/flags/<int:flag_id>/", audit.flag_detail, name="flag"),
    path("decon/", decon.decon_list, name="decon"),
    path("decon/<str:name>/", decon.decon_benchmark, name="decon_benchmark"),
    path("decon/<str:name>/flag/", decon.decon_flag, name="decon_flag"),
    path("users/", users.user_list, name="users"),
    path("users/create/", users.user_create, name="user_create"),
    path("users/<int:user_id>/role/", users.user_role, name="user_role"),
    path("users/<int:user_id>/token/", users.token_issue, name="token_issue"),
    path("users/<int:user_id>/token/revoke/", users.token_revoke, name="token_revoke"),
    path("users/<int:user_id>/identity/", users.identity_link, name="identity_link"),
    path("users/identity/<int:identity_id>/unlink/", users.identity_unlink, name="identity_unlink"),
]

# The overview keeps the project-wide name "home" (LOGIN_REDIRECT_URL, the brand link).
home_urlpatterns = [path("", overview.home, name="home")]
