"""The policy pack that keeps a fork of this stack from losing runs or going public.

A package so tests import its modules (`policy.policies`, the registry, and the rules);
`pulumi preview --policy-pack policy` runs `__main__.py` instead, which puts the function's
package on the pack's path. policy/README.md says which module guards what.
"""
