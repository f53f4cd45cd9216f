"""The deployed functions themselves: how many requests an instance takes, whom it runs and
builds as, and what its environment may hold.

`instances` keeps one request per instance, which ending an overrunning attempt with its
process relies on; `identity` keeps the runtime and build accounts dedicated; `env` refuses
the tests' switches and plain secrets in a deployed environment. Who may reach a function is
public_access.py's; which roles its accounts hold, identities/'s.
"""
