"""The policy pack that keeps a fork of this stack from losing runs or going public.

A package so tests import `policy.policies`; `pulumi preview --policy-pack policy` runs
`__main__.py` instead.
"""

# Importing infra puts function/ on the path (see infra/__init__.py): the policies take the
# function's default collection names from the function itself.
import infra  # noqa: F401
