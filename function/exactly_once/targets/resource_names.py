"""The full resource name of a workflow, as the Workflows API takes it.

Its own module, free of the Workflows client, so the stack's config validation checks a job's
`workflow` against the very pattern the job checks its body with.
"""

from __future__ import annotations

import re

WORKFLOW_RESOURCE_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/workflows/[^/]+$")
