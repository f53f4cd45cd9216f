"""`make soak`: the local scheduler's faults at scale, drawn from a seed, counted independently.

- plan: the fault kinds and each run's fault schedule, from the seed;
- scheduler: the local Cloud Scheduler (localrun.scheduler) with a run's first attempt shaped
  by its schedule; injector: the instance and Firestore faults around that attempt;
- served/: the job the soak's instances run, which records every execution in a file;
- runner: one soak, end to end; checker: the independent count; report: what it prints.
"""
