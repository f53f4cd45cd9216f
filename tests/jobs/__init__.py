"""Your jobs' tests: `make check` lints them, `make test` runs them (docs/jobs.md)."""
