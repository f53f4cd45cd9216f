"""Where tokens are kept and for how long: read from the environment when the instance starts.

Apart from the token code itself, so that checking this configuration at import costs an
instance that only serves scheduled runs nothing more: the token code is imported by the
first token request (main.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exactly_once.config import DEFAULT_IDEMPOTENCY_COLLECTION, collection_id, positive_seconds

# The token check's environment variables, read here and written by the stack.
COLLECTION_ENV = "IDEMPOTENCY_COLLECTION"
RETENTION_ENV = "IDEMPOTENCY_RETENTION_SECONDS"
# A token outlives the run it guards, and every retry of that run, by far.
DEFAULT_RETENTION_SECONDS = 7 * 86_400.0


@dataclass(frozen=True)
class TokenStoreConfig:
    collection: str = DEFAULT_IDEMPOTENCY_COLLECTION
    retention_seconds: float = DEFAULT_RETENTION_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TokenStoreConfig:
        # Unset or blank is the default collection, as the policy pack reads the variable.
        collection = env.get(COLLECTION_ENV, "").strip() or DEFAULT_IDEMPOTENCY_COLLECTION
        retention = positive_seconds(env, RETENTION_ENV, DEFAULT_RETENTION_SECONDS)
        return cls(collection_id(COLLECTION_ENV, collection), retention)
