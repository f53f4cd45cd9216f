"""Idempotency tokens for a downstream step that may be called twice for one run.

`tokens` records a token once and tells every later caller it is a duplicate; `endpoint` is
its HTTP face, the `check_idempotency_token` function a workflow calls.
"""
