"""Who a function runs and builds as: a dedicated account, never a default one.

- function-dedicated-service-account: the runtime account is the stack's own, not the
  project's default compute or App Engine account (Editor on the whole project);
- function-build-service-account: Cloud Build builds the function as a dedicated account,
  not its default identity, which in new projects is the default compute account.

Which project roles these accounts may hold is identities/'s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pulumi_policy import ResourceValidationArgs

from ..engine.grants import account_email
from ..engine.props import UNKNOWN, is_blank, lookup
from ..engine.types import CLOUD_RUN_V2_SERVICE, FUNCTION_V2

DEFAULT_COMPUTE_SA = re.compile(r"^\d+-compute@developer\.gserviceaccount\.com$")
APP_ENGINE_DEFAULT_SA = re.compile(r"^[^@]+@appspot\.gserviceaccount\.com$")
LEGACY_CLOUD_BUILD_SA = re.compile(r"^\d+@cloudbuild\.gserviceaccount\.com$")


def _service_account_property(resource_type: str) -> tuple[str, ...]:
    if resource_type == FUNCTION_V2:
        return ("serviceConfig", "serviceAccountEmail")
    if resource_type == CLOUD_RUN_V2_SERVICE:
        return ("template", "serviceAccount")
    return ("serviceAccountEmail",)


def check_dedicated_service_account(args: ResourceValidationArgs) -> Iterable[str]:
    path = _service_account_property(args.resource_type)
    account = lookup(args.props, *path)
    prop = ".".join(path)
    if account is UNKNOWN:
        return  # a new account's email is only known after it is created
    if is_blank(account):
        yield (
            f"{args.resource_type} '{args.name}': property {prop} is not set, so it runs as the project's "
            "default compute account (Editor on the whole project). Set it to the dedicated runtime "
            "service account."
        )
    elif isinstance(account, str) and (
        DEFAULT_COMPUTE_SA.match(account.strip()) or APP_ENGINE_DEFAULT_SA.match(account.strip())
    ):
        yield (
            f"{args.resource_type} '{args.name}': property {prop} is the default service account "
            f"'{account}', which holds broad project roles. Set it to the dedicated runtime service account."
        )


def check_build_service_account(args: ResourceValidationArgs) -> Iterable[str]:
    path = (
        ("buildConfig", "serviceAccount") if args.resource_type == FUNCTION_V2 else ("buildServiceAccount",)
    )
    account = lookup(args.props, *path)
    prop = ".".join(path)
    if account is UNKNOWN or (
        args.resource_type == FUNCTION_V2 and lookup(args.props, "buildConfig") is UNKNOWN
    ):
        return
    fix = (
        "Set it to a dedicated build account (projects/<p>/serviceAccounts/<email>) holding only "
        "roles/logging.logWriter, roles/artifactregistry.writer on the image repository and "
        "roles/storage.objectViewer on the source bucket."
    )
    if is_blank(account):
        yield (
            f"{args.resource_type} '{args.name}': property {prop} is not set, so Cloud Build builds the "
            f"function as its default identity: in new projects the default compute account (Editor). {fix}"
        )
    elif isinstance(account, str):
        email = account_email(account)
        if (
            DEFAULT_COMPUTE_SA.match(email)
            or LEGACY_CLOUD_BUILD_SA.match(email)
            or APP_ENGINE_DEFAULT_SA.match(email)
        ):
            yield (
                f"{args.resource_type} '{args.name}': property {prop} '{account}' is a default account "
                f"with broad project roles. {fix}"
            )
