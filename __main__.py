"""Exactly-once Cloud Scheduler jobs: the Pulumi program (`pulumi up -s <stack>`).

Settings are read and validated first, so a bad config fails before any resource is touched;
the stack itself is one component, infra/component.py, and its outputs are what it registers.
"""

from infra.component import ExactlyOnceScheduler, ExactlyOnceSchedulerArgs, export_outputs
from infra.settings.from_pulumi import settings_from_pulumi_config
from policy.scheduler_guardrails.rules.config.names import COMPONENT_NAME

settings = settings_from_pulumi_config()
scheduler = ExactlyOnceScheduler(COMPONENT_NAME, ExactlyOnceSchedulerArgs(settings))

export_outputs(scheduler)
