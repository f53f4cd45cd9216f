"""What validated settings deploy beside the function itself: the headers of each Scheduler
job, the APIs and grants the jobs' targets need, the missed-run audit job, the outputs.

No Pulumi: the program declares resources from these answers, and `ops`, the local scheduler,
the policy tests and the docs read the same ones.
"""
