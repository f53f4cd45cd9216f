"""The local Cloud Scheduler and the demo: exactly-once on this machine, before any deploy."""

# Importing infra puts function/ on the path (see infra/__init__.py), so localrun imports the
# function's header names, formatter and collection names from the function itself.
import infra  # noqa: F401
