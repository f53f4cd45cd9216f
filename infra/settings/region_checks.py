"""Where a stack runs: the second region and the ledger's location, checked together.

Cloud Scheduler is regional: while its region is down, none of a one-region stack's jobs
fire. A stack with `secondRegion` deploys its function and every Scheduler job in both
regions; both deliveries of a run name the same location (StackSettings.run_location), so
they compute one run id and the ledger runs it once. That only helps if the ledger outlives
either region: a database in one region is down with it, and then neither region's function
can claim a run. So two regions require a multi-region database location, and an existing
database (which the stack does not create, and so cannot place) must be said to be in one.

Pure data, no Pulumi: `make check`, the fork tests, the program and the policy pack's stack
settings all go through infra/settings/loading.py, which calls this.
"""

from __future__ import annotations

import re

from infra.settings.stack import StackSettings
from policy.scheduler_guardrails.rules.config.problems import ConfigProblems

SECOND_REGION_KEY = "secondRegion"
DATABASE_LOCATION_KEY = "databaseLocation"
CREATE_DATABASE_KEY = "createDatabase"
# How Cloud Run and Cloud Scheduler spell a region: `europe-west1`, `us-central1`,
# `northamerica-northeast2`, `me-central2`.
REGION_NAME = re.compile(r"^[a-z]+-[a-z]+[0-9]{1,2}$")
# Firestore's multi-region locations: a database in one survives the loss of any one region.
MULTI_REGION_LOCATIONS = ("nam5", "nam7", "eur3")


def region_errors(settings: StackSettings, errors: ConfigProblems) -> list[str]:
    """Every problem with `secondRegion` and `databaseLocation`, each naming the keys and values."""
    problems: list[str] = []
    second, location = settings.second_region, settings.database_location
    second_key, location_key = errors.key(SECOND_REGION_KEY), errors.key(DATABASE_LOCATION_KEY)
    malformed = bool(location) and location not in MULTI_REGION_LOCATIONS and not REGION_NAME.match(location)
    if malformed:
        problems.append(
            f"{location_key}: {location!r} is not a Firestore location: a multi-region "
            f"({', '.join(MULTI_REGION_LOCATIONS)}) or a region such as 'europe-west1'"
        )
    if not second:
        return problems
    if not REGION_NAME.match(second):
        problems.append(
            f"{second_key}: {second!r} is not a region name (lower-case, such as 'europe-west4' or "
            "'us-east1', as `gcloud scheduler locations list` prints them)"
        )
    elif second == settings.region:
        problems.append(
            f"{second_key}: {second!r} is gcp:region too; a second region must be another one, or "
            f"leave {second_key} unset"
        )
    if not settings.create_database and not location:
        problems.append(
            f"{location_key}: {second_key} is {second!r} and the stack uses the existing database "
            f"{settings.database_name!r} ({errors.key(CREATE_DATABASE_KEY)} false), whose location the "
            f"stack cannot see: set {location_key} to that database's location (`gcloud firestore "
            "databases describe`), which must be a multi-region "
            f"({', '.join(MULTI_REGION_LOCATIONS)}) for the ledger to outlive one region"
        )
    elif not malformed and settings.ledger_location not in MULTI_REGION_LOCATIONS:
        shown = f"{location!r}" if location else f"unset, so gcp:region {settings.region!r}"
        problems.append(
            f"{location_key}: {second_key} is {second!r}, but the run ledger's database location is "
            f"{shown}, one region: while it is down neither region's function can claim a run. Use a "
            f"multi-region location ({', '.join(MULTI_REGION_LOCATIONS)}: nam5 for us-*, eur3 for "
            f"europe-*) or leave {second_key} unset"
        )
    return problems
