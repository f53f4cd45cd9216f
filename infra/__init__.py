"""The Pulumi program's modules.

They share a few definitions with the function (header names, defaults, record fields, the
missed-run audit) by importing its package, `exactly_once`, which `make install` and the
program's requirements.txt install into the project's virtualenv from function/. Only its
standard-library modules are used here (tests/infra/test_boundaries.py keeps it so).
"""
