"""Forms: input validation only; the services do the work."""

from __future__ import annotations

from django import forms

from webapp.dashboard.permissions import ROLES

ROLE_CHOICES = [(r, r) for r in ROLES]


class UserCreateForm(forms.Form):
    username = forms.RegexField(regex=r"^[\w.@+-]{1,150}$", max_length=150)
    password = forms.CharField(min_length=8, widget=forms.PasswordInput)
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial="viewer")


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES)


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


class AuditForm(forms.Form):
    source = forms.CharField(max_length=100, help_text="source name or id")
    file_path = forms.CharField(max_length=1000, required=False, label="File")
    document_id = forms.IntegerField(min_value=0, required=False, label="Document id")


class FlagForm(forms.Form):
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
