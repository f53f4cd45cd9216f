"""The samples as the component deploys them (infra/resources/sample_seam.py): the component
finds this module when the room is present, and a fork that deleted the room deploys none."""

from __future__ import annotations

from infra.plan.needs import extra_apis, token_check_called_from_outside
from infra.resources.sample_seam import CallingSamples, GrantedSamples, SampleContext, SampleDeployer
from infra.samples.targets import sample_targets
from infra.samples.workflows import WORKFLOWS_API, TokenCheck, sample_workflows, token_check


class _Samples:
    def granted(self, context: SampleContext) -> GrantedSamples:
        """The token check the sample workflows and sample Cloud Run jobs call, then the
        samples the runtime account is granted on."""
        settings, apis = context.settings, context.apis
        checker = None
        if context.identities.token_check is not None:
            checker = token_check(
                context.name,
                settings,
                parent=context.parent,
                ledger=context.ledger,
                build=context.build,
                token_check_account=context.identities.token_check,
                function_opts=context.function_opts,
                reachable_from_cloud_run=token_check_called_from_outside(settings),
            )
        targets = sample_targets(
            context.name,
            settings,
            parent=context.parent,
            token_check_uri=checker.uri if checker else None,
            token_check_service=checker.service if checker else None,
            apis=[context.ready, *(apis[api] for api in ("run.googleapis.com", *extra_apis(settings)))],
        )
        return GrantedSamples(
            token_check_uri=checker.uri if checker else None,
            token_check_service=checker.service if checker else None,
            created=targets.created,
            grants=targets.grants,
        )

    def calling(self, context: SampleContext, granted: GrantedSamples) -> CallingSamples:
        """Sample workflows (jobs with `workflow: {sample: true}`), which call the token check."""
        settings = context.settings
        if granted.token_check_uri is None or granted.token_check_service is None:
            return CallingSamples()
        if not settings.sample_workflow_jobs():
            return CallingSamples()
        samples = sample_workflows(
            context.name,
            settings,
            parent=context.parent,
            token_check=TokenCheck(granted.token_check_uri, granted.token_check_service),
            iam_api=context.ready,
            workflows_api=context.apis[WORKFLOWS_API],
        )
        return CallingSamples(
            workflows=samples.workflows,
            workflow_account_email=samples.workflow_account_email,
            grants=samples.grants,
        )


DEPLOYER: SampleDeployer = _Samples()
