"""One delivery of a scheduled run, from its HTTP request to its answer.

`handler` claims the run, runs the job and finishes it; `heartbeat` keeps the run's lease
while the job runs and ends an attempt that overruns; `overlap` holds a job's lock for the
`skip` and `wait` policies; `warm_cache` answers duplicates of completed runs from memory;
`following` asks a downstream API again about the work a run started; `scheduler_request` and
`request_checks` read what the request says; `outcomes` is how each end is answered and
logged; `report` is what one delivery came to, from which its log line and answer are rendered.
"""
