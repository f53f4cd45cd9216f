"""One reading of every proxy job's endpoint switch (Workflows, Cloud Run, BigQuery)."""

from __future__ import annotations

import pytest

from exactly_once.config import ConfigError
from exactly_once.endpoints import ENDPOINT_VARIABLES, ApiEndpoint


@pytest.mark.parametrize("variable", ENDPOINT_VARIABLES)
@pytest.mark.parametrize(
    ("raw", "host", "plaintext", "url"),
    [
        ("", None, False, None),
        ("europe-west1-run.googleapis.com", "europe-west1-run.googleapis.com", False, None),
        ("https://private.example:8443", "private.example:8443", False, "https://private.example:8443"),
        ("http://127.0.0.1:9000", "127.0.0.1:9000", True, "http://127.0.0.1:9000"),
        ("http://localhost:9000/", "localhost:9000", True, "http://localhost:9000"),
    ],
)
def test_endpoint_override(variable, raw, host, plaintext, url):
    endpoint = ApiEndpoint.from_env({variable: raw}, variable)
    assert (endpoint.host, endpoint.plaintext) == (host, plaintext)
    assert endpoint.url == (url or (f"https://{host}" if host else None))


@pytest.mark.parametrize("variable", ENDPOINT_VARIABLES)
@pytest.mark.parametrize("raw", ["http://10.0.0.1:80", "ftp://127.0.0.1", "https://host/v1/path"])
def test_bad_endpoint_override_names_the_variable(variable, raw):
    with pytest.raises(ConfigError, match=variable):
        ApiEndpoint.from_env({variable: raw}, variable)
