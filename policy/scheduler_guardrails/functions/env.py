"""What a deployed function's environment may not hold: the tests' switches, and plain secrets.

- function-no-test-switches: no plaintext *_API_ENDPOINT (the proxies' endpoint overrides,
  plaintext only on loopback, exactly_once/endpoints.py) and no
  DOWNSTREAM_ID_TOKEN_DISABLED (docs/proxy.md): both are for tests only;
- secrets-by-reference: no plain environment variable whose name says secret; such values are
  Secret Manager references (`secrets:`), read by Cloud Run when an instance starts, so they
  sit neither in the stack's config and state nor in the service's description;
- function-environment-size: the whole environment within Cloud Run's 32 KiB.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from pulumi_policy import ResourceValidationArgs

from exactly_once.endpoints import ENDPOINT_VARIABLES, ID_TOKEN_DISABLED_ENV

from ..engine.env import env_of, plain_env
from ..engine.props import MISSING, UNKNOWN, elements, is_unknown_sentinel, lookup
from ..engine.types import CLOUD_RUN_V2_JOB, CLOUD_RUN_V2_SERVICE, FUNCTION_V1, FUNCTION_V2
from ..rules.config.access import looks_secret
from ..rules.environment_size import environment_size_problem

# The test-only switch of function/jobs/ that sends downstream calls without an ID token.
# The kinds whose plain environment variables secrets-by-reference reads (engine/env.py).
SECRET_ENV_TYPES: Final = (FUNCTION_V2, FUNCTION_V1, CLOUD_RUN_V2_SERVICE, CLOUD_RUN_V2_JOB)


def check_no_test_switches(args: ResourceValidationArgs) -> Iterable[str]:
    for variable in ENDPOINT_VARIABLES:
        endpoint = env_of(args.resource_type, args.props, variable)
        if isinstance(endpoint, str) and endpoint.strip().lower().startswith("http://"):
            yield (
                f"{args.resource_type} '{args.name}': environment variable {variable}="
                f"'{endpoint}' is the tests' plaintext endpoint without credentials. Remove it (the "
                "library default is right), or give host[:port] / https://host[:port]."
            )
    disabled = env_of(args.resource_type, args.props, ID_TOKEN_DISABLED_ENV)
    if disabled is not MISSING and disabled is not UNKNOWN:
        yield (
            f"{args.resource_type} '{args.name}': environment variable {ID_TOKEN_DISABLED_ENV} is set "
            f"('{disabled}'); it is a test-only switch that sends downstream calls without an ID token. "
            "Remove it from deployed functions."
        )


def check_secrets_by_reference(args: ResourceValidationArgs) -> Iterable[str]:
    for variable, value in plain_env(args.resource_type, args.props):
        if looks_secret(variable) and isinstance(value, str) and value.strip():
            yield (
                f"{args.resource_type} '{args.name}': environment variable {variable} holds a plain value "
                "and its name says secret; it would sit in the stack's config and state and be shown to "
                "anyone who may read the service. Store it in Secret Manager and reference it (a job's "
                f"secrets: {{{variable}: <secret>}}) so Cloud Run reads it when an instance starts."
            )


def check_environment_size(args: ResourceValidationArgs) -> Iterable[str]:
    """function-environment-size: the function's variables (names and values) and its secret
    variables' names within Cloud Run's limit, by the one size check the stack's settings use
    (infra/settings/environment.py), so a fork's own program or a hand-added variable is held
    to it too. Any name or value unknown in preview: checked on the update."""
    variables = lookup(args.props, "serviceConfig", "environmentVariables")
    secrets = elements(args.props, "serviceConfig", "secretEnvironmentVariables")
    if variables is UNKNOWN or secrets is UNKNOWN:
        return
    env = dict(plain_env(args.resource_type, args.props))
    names = [lookup(secret, "key") for secret in secrets] if isinstance(secrets, list) else []
    if any(value is UNKNOWN or is_unknown_sentinel(value) for value in env.values()) or UNKNOWN in names:
        return
    problem = environment_size_problem(env, {name: None for name in names if isinstance(name, str)})
    if problem is not None:
        yield f"Function '{args.name}': {problem}"
