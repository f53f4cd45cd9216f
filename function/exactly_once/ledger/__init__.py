"""The run ledger: one Firestore document per scheduled run, and the protocol over it.

`lifecycle` decides a record's states and what each write makes of them (pure: every other
path asks it); `protocol` claims, renews, completes, releases and gives back a run with
single-document conditional writes; `records` is how those outcomes reach a delivery (its
exceptions, the claimed record of a run); `store` is the small persistence interface and its
Firestore implementation; `writes` carries other documents' writes in the ledger's own
commits; `unheard_claims` remembers claim writes that may have committed unanswered; `job_status`
keeps each job's last result; `fields` names the fields the stack's Firestore settings refer to
(the TTL field, the unindexed ones).
"""
