"""Create the first admin user (idempotent). Credentials from SHARDYARD_ADMIN_USER /
SHARDYARD_ADMIN_PASSWORD, or a generated password printed once."""

from django.core.management.base import BaseCommand

from shardcore.config import env_str
from webapp.ops.services import admin_ensure


class Command(BaseCommand):
    help = "Create the admin user if it does not exist and print its credentials."

    def handle(self, *args, **options):
        username = env_str("SHARDYARD_ADMIN_USER", "admin")
        password = env_str("SHARDYARD_ADMIN_PASSWORD")
        user, created_password = admin_ensure(username=username, password=password)
        if created_password is None:
            self.stdout.write(f"Admin user {user!r} exists (password unchanged).")
        elif password:
            self.stdout.write(f"Created admin user {user!r} with SHARDYARD_ADMIN_PASSWORD.")
        else:
            self.stdout.write(
                self.style.SUCCESS(f"Created admin user {user!r}, password {created_password}")
            )
