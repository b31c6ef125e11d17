"""Forms: input validation only; the services do the work."""

from __future__ import annotations

from django import forms
from django.db.models import Count

from shardcore import limits
from shardcore.encoders import DEFAULT_TOKENIZER
from shardcore.shuffle import SHUFFLES
from webapp.catalog.models import Annotation, ArtifactStatus, Pool, TokenizedSource
from webapp.catalog.selectors import annotation_columns
from webapp.dashboard.fields import Form, LimitField
from webapp.roles import ROLES

ROLE_CHOICES = [(r, r) for r in ROLES]


class UserCreateForm(forms.Form):
    username = forms.RegexField(regex=r"^[\w.@+-]{1,150}$", max_length=150)
    password = forms.CharField(min_length=8, widget=forms.PasswordInput)
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial="viewer")


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES)


class IdentityLinkForm(forms.Form):
    """The provider's issuer and subject (its ID tokens' ``iss`` and ``sub``) to link."""

    issuer = forms.CharField(max_length=255)
    subject = forms.CharField(max_length=255)


class SourceRegisterForm(forms.Form):
    name = forms.SlugField(max_length=100)
    uri = forms.CharField(max_length=1000, help_text="a directory under a source root, or s3://")
    text_field = forms.CharField(max_length=100, initial="text")
    metadata_fields = forms.CharField(
        required=False, help_text="comma-separated properties, e.g. language,license"
    )
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))

    def clean_metadata_fields(self) -> list[str]:
        raw = self.cleaned_data.get("metadata_fields") or ""
        return [f.strip() for f in raw.split(",") if f.strip()]


class AuditForm(Form):
    source = forms.CharField(max_length=100, help_text="source name or id")
    file_path = forms.CharField(max_length=1000, required=False, label="File")
    document_id = forms.IntegerField(min_value=0, required=False, label="Document id")


class FlagForm(Form):
    source_id = forms.IntegerField(min_value=1)
    file_path = forms.CharField(max_length=1000, required=False)
    document_ids = forms.CharField(required=False, help_text="comma-separated document ids")
    reason = forms.CharField(max_length=2000)

    def clean_file_path(self):
        return self.cleaned_data.get("file_path") or None

    def clean_document_ids(self):
        raw = self.cleaned_data.get("document_ids") or ""
        try:
            ids = [int(x) for x in raw.replace(" ", "").split(",") if x]
        except ValueError:
            raise forms.ValidationError("document ids are integers separated by commas") from None
        return ids or None


class TokenizeForm(Form):
    tokenizer = forms.CharField(
        max_length=200,
        required=False,
        widget=forms.TextInput(attrs={"placeholder": DEFAULT_TOKENIZER}),
        help_text=f"tiktoken:<encoding> or hf:<path>; empty for the default, "
        f"{DEFAULT_TOKENIZER} (works offline)",
    )
    engine = forms.ChoiceField(
        choices=[
            ("auto", "auto (fastest with identical ids)"),
            ("reference", "reference (tiktoken / tokenizers)"),
            ("gigatoken", "gigatoken"),
        ],
        initial="auto",
        required=False,
        help_text="encoding engine; the ids are the reference library's with any engine",
    )

    def clean_tokenizer(self) -> str | None:
        return (self.cleaned_data.get("tokenizer") or "").strip() or None

    def clean_engine(self) -> str:
        return self.cleaned_data.get("engine") or "auto"


class PoolBuildForm(Form):
    name = forms.SlugField(max_length=100)
    tokenized_ids = forms.ModelMultipleChoiceField(
        queryset=None, label="Tokenized sources", widget=forms.SelectMultiple(attrs={"size": 4})
    )
    # The library's ranges and messages (shardcore.limits), as the command line's.
    seq_len = LimitField(
        name="seq_len",
        check=limits.seq_len,
        initial=512,
        label="Sequence length",
        help_text="tokens trained on per sample (records hold one more)",
    )
    filter = forms.CharField(
        max_length=2000, required=False, help_text="a DuckDB expression, e.g. kind = 'prose'"
    )
    shuffle = forms.ChoiceField(choices=[(s, s) for s in SHUFFLES], initial="exact")
    seed = LimitField(name="seed", check=limits.seed, initial=0)
    val_fraction = LimitField(
        name="val_fraction",
        check=limits.val_fraction,
        initial=0,
        label="Validation fraction",
        help_text=f"share of the documents held out, 0 to {limits.MAX_VAL_FRACTION:g}",
    )
    annotation_ids = forms.ModelMultipleChoiceField(
        queryset=None,
        required=False,
        label="Annotations to join",
        widget=forms.SelectMultiple(attrs={"size": 4}),
        help_text="their columns read as <annotator>.<column> in the filter and the pool",
    )

    def __init__(self, *args, **kwargs):

        super().__init__(*args, **kwargs)
        self.fields["annotation_ids"].queryset = (
            Annotation.objects.filter(status=ArtifactStatus.READY)
            .select_related("tokenized_source__source")
            .order_by("tokenized_source__source__name", "annotator", "-pk")
        )
        names = annotation_columns()
        if names:
            self.fields["filter"].help_text += (
                "; with an annotation joined, its columns: " + ", ".join(names[:40])
            )
        self.fields["tokenized_ids"].queryset = (
            TokenizedSource.objects.filter(status=ArtifactStatus.READY)
            .select_related("source", "tokenizer")
            .order_by("source__name", "-pk")
        )
        # The sequence length most pools have (the demo's 512 on a fresh install).
        common = (
            Pool.objects.values("seq_len")
            .annotate(n=Count("pk"))
            .order_by("-n", "-seq_len")
            .values_list("seq_len", flat=True)
            .first()
        )
        if common:
            self.fields["seq_len"].initial = common
        self.fields["tokenized_ids"].label_from_instance = lambda t: (
            f"{t.source.name} · {t.tokenizer.spec} · {t.num_tokens:,} tokens (#{t.pk})"
        )

    def clean_tokenized_ids(self) -> list[int]:
        return [t.pk for t in self.cleaned_data["tokenized_ids"]]
