"""Target kinds: the things a job can start once per scheduled run through the function's
proxy jobs (a Workflows execution, a Cloud Run job execution, a BigQuery query job).

One module per kind (its config keys and parsing, body, environment table, grants, project
roles and APIs) behind one registry, registry.py: the rest of the stack walks the registry and
never names a kind. No Pulumi: the samples the stack deploys for a kind live in infra/samples/.
"""
