"""Testing a job as the function runs it, without credentials or a server.

`JobEnvironment` delivers runs of a job through the function's delivery path on an in-memory
ledger (or the emulator's, when given a client) and returns what each came to (`JobRun`);
`MemoryRunStore` is that ledger, which the Firestore store's conformance suite holds to
Firestore's behaviour. docs/jobs.md ("Testing your job") shows both in a job's tests.
"""

from exactly_once.testing.job_environment import FirestoreNeeded, JobEnvironment, JobRun
from exactly_once.testing.memory_store import MemoryRunStore, ServerClock

__all__ = ["FirestoreNeeded", "JobEnvironment", "JobRun", "MemoryRunStore", "ServerClock"]
