"""How the pack reads what the engine sends it; no rule lives here.

`props` reads one property (`lookup`: a value, MISSING or UNKNOWN in preview) and parses
numbers and durations as the engine sends them; `types` names the resource kinds; `env` reads a
deployment's environment variables wherever its kind keeps them; `grants` reads IAM grants in
each of their forms; `functions` tells the token check from the functions that keep run
records; `checks` makes a rule that yields messages a Pulumi policy.
"""
