"""Admin views of the catalog. Built artifacts are read-only here: a change would break
the fingerprint they carry (services build a new version instead)."""

from django.contrib import admin

from webapp.catalog import models as m


class ReadOnlyArtifactAdmin(admin.ModelAdmin):
    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None or obj.status != m.ArtifactStatus.READY

    def has_add_permission(self, request) -> bool:
        return False


class SourceFileInline(admin.TabularInline):
    model = m.SourceFile
    extra = 0
    fields = ("path", "size", "num_documents", "bad_lines")
    readonly_fields = fields


@admin.register(m.Source)
class SourceAdmin(admin.ModelAdmin):
    list_display = ("name", "uri", "status", "num_files", "num_documents", "num_bytes")
    search_fields = ("name", "uri")
    inlines = [SourceFileInline]


@admin.register(m.Tokenizer)
class TokenizerAdmin(admin.ModelAdmin):
    list_display = ("spec", "vocab_size", "eos_id", "fingerprint")


@admin.register(m.TokenizedSource)
class TokenizedSourceAdmin(ReadOnlyArtifactAdmin):
    list_display = ("id", "source", "tokenizer", "status", "num_documents", "num_tokens")
    list_filter = ("status",)
    raw_id_fields = ("job", "supersedes")


@admin.register(m.Pool)
class PoolAdmin(ReadOnlyArtifactAdmin):
    list_display = ("id", "name", "split", "status", "seq_len", "num_records", "num_tokens")
    list_filter = ("status", "split")
    raw_id_fields = ("job", "supersedes", "train_pool")


@admin.register(m.Shard)
class ShardAdmin(admin.ModelAdmin):
    list_display = ("prefix", "num_records", "num_tokens", "num_bytes", "checksum")
    raw_id_fields = ("tokenized_source", "pool", "export")


class MixtureComponentInline(admin.TabularInline):
    model = m.MixtureComponent
    extra = 0
    raw_id_fields = ("pool",)


@admin.register(m.Mixture)
class MixtureAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at")


@admin.register(m.MixtureVersion)
class MixtureVersionAdmin(ReadOnlyArtifactAdmin):
    list_display = ("mixture", "number", "status", "token_budget", "seed", "num_samples")
    inlines = [MixtureComponentInline]
    raw_id_fields = ("job",)


@admin.register(m.Export)
class ExportAdmin(admin.ModelAdmin):
    list_display = ("version", "format", "status", "num_records", "num_bytes", "path")
    raw_id_fields = ("job",)


@admin.register(m.TrainingRun)
class TrainingRunAdmin(admin.ModelAdmin):
    list_display = ("name", "mixture_version", "state", "last_step", "consumed_tokens")
    search_fields = ("name", "external_id")


@admin.register(m.RunProgress)
class RunProgressAdmin(admin.ModelAdmin):
    list_display = ("run", "step", "consumed_samples", "consumed_tokens", "reported_at")
    raw_id_fields = ("run",)


@admin.register(m.Flag)
class FlagAdmin(admin.ModelAdmin):
    list_display = ("id", "target", "source", "source_file", "reason", "created_at")
    raw_id_fields = ("source_file",)


@admin.register(m.Taint)
class TaintAdmin(admin.ModelAdmin):
    list_display = (
        "flag",
        "tokenized_source",
        "pool",
        "mixture_version",
        "run",
        "export",
        "documents",
    )
    raw_id_fields = ("flag", "tokenized_source", "pool", "mixture_version", "run", "export")
