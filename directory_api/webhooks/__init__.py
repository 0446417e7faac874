"""Webhooks (API.md 16): events written with the changes they tell of (`events`), and
their delivery by the outbox worker (`delivery`). The subscriptions' endpoints are
api/webhooks.py; where the service may connect, platform/ssrf.py and platform/outbound.py."""
