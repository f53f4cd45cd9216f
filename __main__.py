"""Exactly-once Cloud Scheduler jobs: the Pulumi program (`pulumi up -s <stack>`).

Settings are read and validated first, so a bad config fails before any resource is touched;
the stack itself is one component, infra/stack.py.
"""

import pulumi

from infra.names import DEFAULT_COMPONENT
from infra.pulumi_config import settings_from_pulumi_config
from infra.stack import ExactlyOnceScheduler

settings = settings_from_pulumi_config()
scheduler = ExactlyOnceScheduler(DEFAULT_COMPONENT, settings)

pulumi.export("functionUri", scheduler.function_uri)
pulumi.export("jobNames", scheduler.job_names)
pulumi.export("runtimeServiceAccount", scheduler.runtime_service_account_email)
pulumi.export("invokerServiceAccount", scheduler.invoker_service_account_email)
pulumi.export("buildServiceAccount", scheduler.build_service_account_email)
pulumi.export("databaseName", scheduler.database_name)
pulumi.export("runsCollection", scheduler.runs_collection)

# Only when a job has a sample workflow (workflow: {sample: true}).
if scheduler.token_check_uri is not None:
    pulumi.export("tokenCheckUri", scheduler.token_check_uri)
    pulumi.export("tokenCheckServiceAccount", scheduler.token_check_service_account_email)
    pulumi.export("workflowServiceAccount", scheduler.workflow_service_account_email)
    pulumi.export("sampleWorkflows", scheduler.sample_workflows)
