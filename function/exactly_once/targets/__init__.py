"""What the shipped proxy jobs (function/jobs/) share: how a downstream failure is classified
(`errors`), which endpoints may be reached without credentials (`loopback`), and the resource
names the APIs take (`resource_names`, which the stack's config validation checks too).
"""
