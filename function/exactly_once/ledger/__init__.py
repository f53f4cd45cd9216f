"""The run ledger: one Firestore document per scheduled run, and the protocol over it.

`protocol` claims, renews, completes and releases a run with single-document conditional
writes; `records` is what a record holds and how a lease is judged; `store` is the small
persistence interface and its Firestore implementation; `writes` carries other documents'
writes in the ledger's own commits; `unheard_claims` remembers claim writes that may
have committed unanswered; `fields` names the fields the
stack's Firestore settings refer to (the TTL field, the unindexed ones).
"""
