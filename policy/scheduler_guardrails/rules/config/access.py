"""What a job needs beyond its code, declared with the job: settings (`env`), secrets by
Secret Manager reference (`secrets`), and access for the runtime account (`grants`), each on
one named resource.

`GRANT_KINDS` is the one list of resources the runtime account may be granted a role on; which
roles, grants.py's rows say. The stack's own targets (a Cloud Run job's execution rights, a
BigQuery job's datasets, a secret's accessor) and a job's declared `grants` become the same
`ResourceGrant`s, declared by infra/resources/runtime_access.py and checked by the policy pack
(identities/runtime.py) against this same list. Nothing here is project-wide: the roles
a runtime account holds on the project are grants.py's project-wide rows.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from exactly_once.targets.job_tables import ENV_NAME
from exactly_once.targets.resource_names import BIGQUERY_DATASET, CLOUD_RUN_JOB_RESOURCE_NAME

from .grants import JOB_GRANTS, STACK_GRANTS, Account, Scope
from .problems import ConfigProblems

ACCESS_KEYS: Final = ("env", "secrets", "grants")
GRANT_FIELDS: Final = (
    "role",
    "cloudRunJob",
    "cloudRunService",
    "dataset",
    "secret",
    "topic",
    "subscription",
    "bucket",
)


@dataclass(frozen=True)
class GrantKind:
    """A kind of resource the runtime account may hold a role on."""

    key: str  # how a grant names it in the config (`dataset: acme-data.sales`)
    scope: Scope  # its rows in grants.py, and the Pulumi type of its IAM member resource
    pattern: re.Pattern[str]
    shown: str  # the name's form, for error messages

    @property
    def resource_type(self) -> str:
        return self.scope.resource_type

    @property
    def roles(self) -> frozenset[str]:
        """What a job may need on it (grants.py's rows that a job's `grants` may ask for):
        never admin, owner or IAM-changing roles."""
        return frozenset(
            grant.role
            for grant in STACK_GRANTS
            if grant.account is Account.RUNTIME and grant.scope is self.scope and JOB_GRANTS in grant.when
        )


GRANT_KINDS: Final = (
    GrantKind(
        "cloudRunJob",
        Scope.CLOUD_RUN_JOB,
        CLOUD_RUN_JOB_RESOURCE_NAME,
        "projects/<project>/locations/<region>/jobs/<job>",
    ),
    GrantKind(
        "cloudRunService",
        Scope.CLOUD_RUN_SERVICE,
        re.compile(r"^projects/[^/]+/locations/[^/]+/services/[a-z][a-z0-9-]{0,62}$"),
        "projects/<project>/locations/<region>/services/<service>",
    ),
    GrantKind("dataset", Scope.DATASET, BIGQUERY_DATASET, "<project>.<dataset>"),
    GrantKind(
        "secret",
        Scope.SECRET,
        re.compile(r"^projects/[^/]+/secrets/[A-Za-z0-9_-]{1,255}$"),
        "projects/<project>/secrets/<secret>",
    ),
    GrantKind(
        "topic",
        Scope.TOPIC,
        re.compile(r"^projects/[^/]+/topics/[A-Za-z][\w.~+%-]{2,254}$"),
        "projects/<project>/topics/<topic>",
    ),
    GrantKind(
        "subscription",
        Scope.SUBSCRIPTION,
        re.compile(r"^projects/[^/]+/subscriptions/[A-Za-z][\w.~+%-]{2,254}$"),
        "projects/<project>/subscriptions/<subscription>",
    ),
    GrantKind("bucket", Scope.BUCKET, re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$"), "<bucket>"),
)
KINDS: Final = MappingProxyType({kind.key: kind for kind in GRANT_KINDS})
KINDS_BY_TYPE: Final = MappingProxyType({kind.resource_type: kind for kind in GRANT_KINDS})

# Plain `env` names that say "secret": such a value belongs in Secret Manager (`secrets`), where
# it is neither in the stack's config nor shown to whoever can read the function's settings.
_SECRET_WORDS: Final = frozenset({"PASSWORD", "PASSWD", "SECRET", "APIKEY", "CREDENTIALS", "PRIVATEKEY"})
_SECRET_PAIRS: Final = frozenset({("API", "KEY"), ("PRIVATE", "KEY"), ("ACCESS", "KEY"), ("AUTH", "TOKEN")})
_SECRET_REFERENCE: Final = re.compile(
    r"^(?:projects/(?P<project>[^/]+)/secrets/)?(?P<secret>[A-Za-z0-9_-]{1,255})(?:/versions/(?P<version>[1-9]\d*|latest))?$"
)


def looks_secret(name: str) -> bool:
    """True for names such as DB_PASSWORD, API_KEY, STRIPE_SECRET, GITHUB_TOKEN."""
    words = name.upper().split("_")
    pairs = set(itertools.pairwise(words))
    return bool(_SECRET_WORDS & set(words)) or bool(_SECRET_PAIRS & pairs) or words[-1] == "TOKEN"


@dataclass(frozen=True, order=True)
class ResourceGrant:
    """`role` for the runtime account on one resource (`kind` is a GRANT_KINDS key)."""

    kind: str
    resource: str
    role: str


@dataclass(frozen=True)
class SecretReference:
    """A secret version the function reads as an environment variable; `project` None: the
    stack's project. `latest` is read when an instance starts; pin a version to roll out
    a new one with a deploy."""

    secret: str
    version: str = "latest"
    project: str | None = None

    def resource(self, stack_project: str) -> str:
        return f"projects/{self.project or stack_project}/secrets/{self.secret}"


@dataclass(frozen=True)
class JobAccess:
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, SecretReference] = field(default_factory=dict)
    grants: tuple[ResourceGrant, ...] = ()


def parse_access(item: Mapping[str, Any], prefix: str, errors: ConfigProblems) -> JobAccess:
    """A job's `env`, `secrets` and `grants` (each optional)."""
    return JobAccess(
        env=_env(item.get("env", {}), f"{prefix}.env", errors),
        secrets=_secrets(item.get("secrets", {}), f"{prefix}.secrets", errors),
        grants=_grants(item.get("grants", []), f"{prefix}.grants", errors),
    )


def _names(raw: Any, key: str, errors: ConfigProblems) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        errors.append(f"{errors.key(key)}: expected an object of NAME: value, got {raw!r}")
        return {}
    valid = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            errors.append(
                f"{errors.key(f'{key}.{name}')}: not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
            )
        elif name.startswith(("X_GOOGLE_", "K_", "FUNCTION_")) or name == "PORT":
            errors.append(f"{errors.key(f'{key}.{name}')}: reserved by Cloud Run")
        else:
            valid[name] = value
    return valid


def _env(raw: Any, key: str, errors: ConfigProblems) -> dict[str, str]:
    env = {}
    for name, value in _names(raw, key, errors).items():
        if looks_secret(name):
            errors.append(
                f"{errors.key(f'{key}.{name}')}: the name says secret; put the value in Secret Manager "
                f"and reference it under secrets.{name} instead of the stack's config"
            )
        elif not isinstance(value, str):
            errors.append(f"{errors.key(f'{key}.{name}')}: expected a string, got {value!r} (quote numbers)")
        else:
            env[name] = value
    return env


def _secrets(raw: Any, key: str, errors: ConfigProblems) -> dict[str, SecretReference]:
    secrets = {}
    for name, value in _names(raw, key, errors).items():
        match = _SECRET_REFERENCE.match(value) if isinstance(value, str) else None
        if match is None or (match["version"] and not match["project"]):
            errors.append(
                f"{errors.key(f'{key}.{name}')}: {value!r} is not a secret reference: <secret> (this "
                "project, latest version), projects/<project>/secrets/<secret> or "
                "projects/<project>/secrets/<secret>/versions/<number|latest>"
            )
            continue
        secrets[name] = SecretReference(match["secret"], match["version"] or "latest", match["project"])
    return secrets


def _grants(raw: Any, key: str, errors: ConfigProblems) -> tuple[ResourceGrant, ...]:
    if not isinstance(raw, list):
        errors.append(f"{errors.key(key)}: expected a list of {{role, <resource kind>: <name>}}, got {raw!r}")
        return ()
    grants = []
    for index, item in enumerate(raw):
        grant = _grant(item, f"{key}[{index}]", errors)
        if grant is not None:
            grants.append(grant)
    return tuple(grants)


def _grant(item: Any, key: str, errors: ConfigProblems) -> ResourceGrant | None:
    kinds = ", ".join(KINDS)
    if not isinstance(item, Mapping):
        errors.append(
            f"{errors.key(key)}: expected {{role: roles/..., <one of {kinds}>: <name>}}, got {item!r}"
        )
        return None
    before = len(errors)
    errors.extend(f"{errors.key(f'{key}.{k}')}: unknown grant key" for k in item if k not in GRANT_FIELDS)
    named = [k for k in item if k in KINDS]
    if len(named) != 1:
        errors.append(
            f"{errors.key(key)}: name exactly one resource ({kinds}); a grant is on one resource, "
            "never the project"
        )
        return None
    kind = KINDS[named[0]]
    resource = item[kind.key]
    if not isinstance(resource, str) or not kind.pattern.match(resource):
        errors.append(f"{errors.key(f'{key}.{kind.key}')}: {resource!r} is not {kind.shown}")
    role = item.get("role")
    if role not in kind.roles:
        errors.append(
            f"{errors.key(f'{key}.role')}: {role!r} is not a role the runtime account may hold on a "
            f"{kind.key}; one of {', '.join(sorted(kind.roles))}"
        )
    if len(errors) > before:
        return None
    return ResourceGrant(kind.key, str(resource), str(role))
