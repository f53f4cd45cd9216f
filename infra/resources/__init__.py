"""The stack's resources, one module per part: the ledger's database and TTL, the identities,
the source and its build, the function, the runtime account's grants, the Scheduler jobs, and
the pauses a first deploy needs while Google propagates grants.

Each function declares one part, parented to the component, with every argument in one call
so a fork changes one thing in one place.
"""
