"""The JSON API for trainers and scripts: token auth, OpenAPI schema at /api/schema/."""
