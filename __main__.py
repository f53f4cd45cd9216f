"""Exactly-once Cloud Scheduler jobs: the Pulumi program (`pulumi up -s <stack>`).

Settings are read and validated first, so a bad config fails before any resource is touched;
the stack itself is one component, infra/stack.py.
"""

import pulumi

from infra.pulumi_config import settings_from_pulumi_config
from infra.stack import ExactlyOnceScheduler

settings = settings_from_pulumi_config()
scheduler = ExactlyOnceScheduler("eos", settings)

pulumi.export("functionUri", scheduler.function_uri)
pulumi.export("jobNames", scheduler.job_names)
pulumi.export("runtimeServiceAccount", scheduler.runtime_service_account_email)
pulumi.export("invokerServiceAccount", scheduler.invoker_service_account_email)
pulumi.export("databaseName", scheduler.database_name)
pulumi.export("runsCollection", scheduler.runs_collection)
