"""Where tokens are kept and for how long: read from the environment when the instance starts.

Apart from the token code itself, so that checking this configuration at import costs an
instance that only serves scheduled runs nothing more: the token code is imported by the
first token request (main.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from exactly_once.config import DEFAULT_IDEMPOTENCY_COLLECTION, ConfigError

DEFAULT_RETENTION_SECONDS = 7 * 86_400.0
_COLLECTION_ID = re.compile(r"^[^/]{1,1500}$")


@dataclass(frozen=True)
class TokenStoreConfig:
    collection: str = DEFAULT_IDEMPOTENCY_COLLECTION
    retention_seconds: float = DEFAULT_RETENTION_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TokenStoreConfig:
        collection = env.get("IDEMPOTENCY_COLLECTION", "").strip() or DEFAULT_IDEMPOTENCY_COLLECTION
        if not _COLLECTION_ID.match(collection) or collection.startswith("__"):
            raise ConfigError("IDEMPOTENCY_COLLECTION", f"{collection!r} is not a Firestore collection id")
        raw = env.get("IDEMPOTENCY_RETENTION_SECONDS", "").strip()
        retention = DEFAULT_RETENTION_SECONDS
        if raw:
            try:
                retention = float(raw)
            except ValueError:
                raise ConfigError("IDEMPOTENCY_RETENTION_SECONDS", f"{raw!r} is not a number") from None
            if not math.isfinite(retention) or retention <= 0:
                raise ConfigError("IDEMPOTENCY_RETENTION_SECONDS", f"{raw!r} must be positive")
        return cls(collection, retention)
