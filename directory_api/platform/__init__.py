"""The platform: what a JSON API on Flask needs and the directory does not shape.

Errors, settings, logs, JSON, CORS, rate limits, sessions, request bodies, HTTP caching,
timeouts, encryption, SQL constructs and column types, slugs, e-mail addresses, CSV,
`Idempotency-Key`, the mail outbox, lists and their pages, and how rows become output.
Nothing here imports the directory (models, schemas, services, views): CI holds this line
(`make lint`, import-linter's contract in setup.cfg).
"""
