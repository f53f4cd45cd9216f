"""Exactly-once Cloud Scheduler jobs: the Pulumi program (`pulumi up -s <stack>`).

Settings are read and validated first, so a bad config fails before any resource is touched;
the stack itself is one component, infra/stack.py.
"""

from infra.names import DEFAULT_COMPONENT
from infra.outputs import export_outputs
from infra.pulumi_config import settings_from_pulumi_config
from infra.stack import ExactlyOnceScheduler

settings = settings_from_pulumi_config()
scheduler = ExactlyOnceScheduler(DEFAULT_COMPONENT, settings)

export_outputs(scheduler)
