"""The policy pack's code, and the rules the Pulumi program shares with it.

One package, whose modules import each other relatively, so it is the same code whichever way
it is found: as `policy.scheduler_guardrails` from the repository's root (the program, the
tests, the tools) and as the top-level `scheduler_guardrails` when the pack's own directory is
the first entry of `sys.path`, as Pulumi's analyzer runs a pack (policy/__main__.py). It
imports nothing of the repository outside policy/; the function's definitions it shares come
from the function's distribution, which policy/requirements.txt pins.

- `rules/`: the stack's rules, which the program validates its config with and the pack judges
  resources by (timing, the config's vocabulary, target kinds, the environment's size);
- `policies.py`: the pack's registry; `engine/` how it reads what the engine sends; the other
  modules and packages the policies, by what they guard;
- `offline.py`, `dump.py`: the policies run as the engine would, without the CLI.
"""
