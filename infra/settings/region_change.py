"""Whether a stack may be deployed in its configured region: only in the one it was deployed in.

A stack's Firestore database, image repository and sample dataset keep their ids whatever the
region (infra/config/names.py), and a location is fixed at creation: moving one means deleting
it and creating it again under the same id, which Google Cloud refuses for a while after the
delete (a Firestore id stays reserved), and which would leave the run ledger, and with it the
record of which runs already ran, behind. So a changed `gcp:region` is refused before anything
is touched; moving a stack is deploying a new one (docs/deploy.md, "Changing the region").
"""

from __future__ import annotations

from infra.config.schema import SettingsError

# The stack output that records the region of the last update (infra/plan/outputs.py).
REGION_OUTPUT = "region"


def check_region_unchanged(deployed: object, region: str, stack: str) -> str:
    """`region`, unless the stack's last update recorded another one (`deployed`; None when the
    stack has never been deployed, or not since it started recording it)."""
    if deployed is None or deployed == "" or deployed == region:
        return region
    raise SettingsError(
        f"gcp:region is '{region}', but stack '{stack}' is deployed in '{deployed}' (its "
        f"`{REGION_OUTPUT}` output): its Firestore database, image repository and sample dataset "
        "cannot move under the same ids, and its run ledger would stay behind. To deploy in "
        f"'{region}', create a new stack there (`pulumi stack init <name>`, the same config with "
        f"gcp:region '{region}'), deploy it, move the jobs over, then `pulumi destroy` this one; "
        f"to keep this stack, set gcp:region back to '{deployed}'."
    )
