"""Exactly-once Cloud Scheduler jobs: the Pulumi program (`pulumi up -s <stack>`).

Settings are read and validated first, so a bad config fails before any resource is touched;
the stack itself is one component, infra/component.py.
"""

from infra.component import ExactlyOnceScheduler
from infra.config.names import DEFAULT_COMPONENT
from infra.plan.outputs import export_outputs
from infra.settings.from_pulumi import settings_from_pulumi_config

settings = settings_from_pulumi_config()
scheduler = ExactlyOnceScheduler(DEFAULT_COMPONENT, settings)

export_outputs(scheduler)
