"""Who holds which role: IAM grants, the stack's own accounts, outside accounts and CI's.

`roles` refuses primitive roles and unconditioned Firestore access; `allowlist` is the one
list of project-wide roles and the rule that only they are granted project-wide; `holders`
keeps each of those roles to the account it is listed for; `runtime` keeps a function's
runtime account to the grants a job is given; `ci` tells which workflow runs may impersonate
an account and keeps those a branch can reach read-only; `outside` refuses grants to accounts
the stack does not create.
"""
