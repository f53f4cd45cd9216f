"""The samples a stack deploys when a job asks for one (`sample: true`): a workflow, a Cloud
Run job, a BigQuery dataset, and the token check the workflow and the Cloud Run job call.
"""
