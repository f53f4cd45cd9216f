"""The Pulumi program's code, in rooms: see infra/README.md for the map and the one direction
the rooms import in.

The program shares its contract with the function (environment variable names, defaults,
header names, record fields, the missed-run audit) by importing the function's package,
`exactly_once`, which `make install` installs from function/. Only its standard-library modules
are used here (tests/infra/test_boundaries.py keeps it so).
"""
