"""Job logic that ships with the function; select one with JOB_HANDLER=module:callable."""
