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
