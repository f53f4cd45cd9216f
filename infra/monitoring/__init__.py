"""What lets an operator see that every run ran exactly once: log-based metrics over the
function's log lines, alert policies with their runbooks, and the dashboard.
"""
