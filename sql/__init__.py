"""The service's SQL, installed as the package `service.sql` (pyproject.toml: package-dir): read
through importlib.resources by service/db.py. migrations/ (forward-only, checksummed), functions/
(each function whole, re-created by `migrate`), queries/ (named blocks) and vocabulary.toml (the
seeded vocabulary, synced by `migrate`)."""
