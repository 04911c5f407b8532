"""How the preflight reaches Google Cloud: one request method, answered by its REST APIs with the Application
Default Credentials, or by recorded answers (PLATFORM_PREFLIGHT_ANSWERS, the tests)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from infra import settings

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


SERVICE_USAGE = "https://serviceusage.googleapis.com/v1"


RESOURCE_MANAGER = "https://cloudresourcemanager.googleapis.com/v3"
CLOUD_BILLING = "https://cloudbilling.googleapis.com/v1"


COMPUTE = "https://compute.googleapis.com/compute/v1"


CLOUD_QUOTAS = "https://cloudquotas.googleapis.com/v1"


CLOUD_QUOTAS_API = "cloudquotas.googleapis.com"


BIGQUERY = "https://bigquery.googleapis.com/bigquery/v2"


LOGIN = (
    "log in with `gcloud auth application-default login` (a person), or point GOOGLE_APPLICATION_CREDENTIALS at a "
    "credential file (CI: the Workload Identity Federation configuration of the environment's deployer)"
)


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: its status and its JSON body."""

    status: int
    body: dict[str, Any]


class Transport(Protocol):
    """What the checks call Google Cloud's REST APIs through."""

    def request(self, method: str, url: str, body: dict[str, Any] | None = None) -> Answer: ...


class CredentialsRefused(Exception):
    """The credentials were found but could not be used (expired, revoked, reauthentication needed)."""


class GoogleTransport:
    """Google Cloud's REST APIs with the Application Default Credentials (google-auth's AuthorizedSession)."""

    def __init__(self, credentials: Any) -> None:
        from google.auth.transport.requests import AuthorizedSession

        self._session = AuthorizedSession(credentials)

    def request(self, method: str, url: str, body: dict[str, Any] | None = None) -> Answer:
        from google.auth.exceptions import RefreshError, TransportError

        try:
            response = self._session.request(method, url, json=body, timeout=60)
        except RefreshError as err:
            raise CredentialsRefused(str(err)) from err
        except TransportError as err:
            return Answer(0, {"error": {"message": f"no answer from {url}: {err}"}})
        try:
            parsed = response.json()
        except ValueError:
            parsed = {"error": {"message": response.text[:300]}}
        return Answer(response.status_code, parsed if isinstance(parsed, dict) else {})


class RecordedTransport:
    """Recorded answers of Google Cloud's APIs, from a folder: index.json lists each request (method, url) with the
    status and the file of the answer, shaped as the API's own response body."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        index = json.loads((folder / "index.json").read_text())
        self._answers = {(entry["method"], entry["url"]): entry for entry in index}
        self.requests: list[tuple[str, str]] = []

    def request(self, method: str, url: str, body: dict[str, Any] | None = None) -> Answer:
        self.requests.append((method, url))
        entry = self._answers.get((method, url))
        if entry is None:
            raise KeyError(f"{self.folder}/index.json: no recorded answer for {method} {url}")
        return Answer(entry["status"], json.loads((self.folder / entry["answer"]).read_text()))


def error_line(answer: Answer) -> str:
    """A Google API error as one line: status, message, and the reason where the API gives one."""
    error = answer.body.get("error") or {}
    reasons = [str(d["reason"]) for d in error.get("details") or [] if isinstance(d, dict) and d.get("reason")]
    status = error.get("status") or answer.status
    reason = f" ({', '.join(reasons)})" if reasons else ""
    return f"{status}{reason}: {error.get('message', 'no message')}"


def default_transport(credentials: Any) -> Transport:
    recorded = settings.PREFLIGHT_ANSWERS.path()
    return RecordedTransport(recorded) if recorded else GoogleTransport(credentials)
