"""Drift found on a schedule: one issue per environment, opened, updated and closed by the checks
(scripts/check_issue.py); who changed a drifted resource, from the Admin Activity audit log
(infra/delivery/audit.py); the report (infra/review/drift.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from infra.delivery.audit import audit_filter, resource_terms, who_changed
from infra.review.diff import review_plan
from infra.review.drift import report
from scripts import check_issue

GH = """#!/bin/bash
echo "gh $*" >> "$STANDIN_LOG"
case "$1 $2" in
  "issue list") cat "$STANDIN_GH_ISSUES" ;;
  "issue create") echo "https://github.com/acme/ml-platform/issues/9" ;;
esac
exit "${GH_EXIT:-0}"
"""


@pytest.fixture
def gh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `gh` stand-in first on PATH: its calls in the returned log; `issue list` answers issues.json."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "gh").write_text(GH)
    (tmp_path / "bin" / "gh").chmod(0o755)
    (tmp_path / "issues.json").write_text("[]")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_LOG", str(tmp_path / "calls.log"))
    monkeypatch.setenv("STANDIN_GH_ISSUES", str(tmp_path / "issues.json"))
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/ml-platform")
    (tmp_path / "report.txt").write_text("drift: platform-dev: 1 resource(s) changed outside Terraform\n")
    return tmp_path


def _calls(folder: Path) -> list[str]:
    return (folder / "calls.log").read_text().splitlines()


def test_a_drift_opens_the_issue_then_updates_the_same_one_and_a_clean_check_closes_it(gh: Path) -> None:
    argv = ["--check", "drift", "--env", "dev", "--report", str(gh / "report.txt")]
    assert check_issue.main([*argv, "--code", "2"]) == 0
    assert _calls(gh)[-1].startswith("gh issue create --title Drift: platform-dev --body-file -")
    # The next check finds the open issue (and not another environment's) and updates it.
    (gh / "issues.json").write_text(
        json.dumps([{"number": 3, "title": "Drift: platform-prod"}, {"number": 9, "title": "Drift: platform-dev"}])
    )
    assert check_issue.main([*argv, "--code", "2"]) == 0
    assert _calls(gh)[-1].startswith("gh issue edit 9 --body-file -")
    assert check_issue.main([*argv, "--code", "0"]) == 0
    assert _calls(gh)[-1].startswith("gh issue close 9 --comment Nothing drifted")
    # Nothing drifted and nothing open: no call but the list.
    (gh / "issues.json").write_text("[]")
    before = len(_calls(gh))
    assert check_issue.main([*argv, "--code", "0"]) == 0
    assert [c.split(" --")[0] for c in _calls(gh)[before:]] == ["gh issue list"]


def test_the_cost_check_keeps_its_own_issue(gh: Path) -> None:
    """The cost check's issue is another than the drift check's, with its own words."""
    (gh / "issues.json").write_text(json.dumps([{"number": 9, "title": "Drift: platform-dev"}]))
    argv = ["--check", "cost", "--env", "dev", "--report", str(gh / "report.txt")]
    assert check_issue.main([*argv, "--code", "2"]) == 0
    calls = (gh / "calls.log").read_text()
    assert "gh issue create --title Over budget: platform-dev --body-file -" in calls
    assert "gh issue edit 9" not in calls
    (gh / "issues.json").write_text(json.dumps([{"number": 12, "title": "Over budget: platform-dev"}]))
    assert check_issue.main([*argv, "--code", "0"]) == 0
    assert _calls(gh)[-1].startswith("gh issue close 12 --comment Every budget holds in the check of")


def test_gh_failing_fails_the_step(gh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GH_EXIT", "4")
    assert (
        check_issue.main(["--check", "drift", "--env", "dev", "--report", str(gh / "report.txt"), "--code", "2"]) == 1
    )


@pytest.mark.parametrize(
    ("rtype", "state", "terms"),
    [
        # The id's last two segments: the audit entry's resourceName writes the location its own way.
        (
            "google_container_node_pool",
            {"id": "projects/p/locations/us-east5/clusters/ml/nodePools/train"},
            ["nodePools/train"],
        ),
        ("google_storage_bucket", {"id": "acme-models"}, ["acme-models"]),
        (
            "kubernetes_network_policy_v1",
            {"metadata": [{"name": "default-deny-ingress", "namespace": "ml-serving"}]},
            ["namespaces/ml-serving/", "/default-deny-ingress"],
        ),
        ("kubernetes_namespace_v1", {"metadata": [{"name": "ml-serving"}]}, ["/ml-serving"]),
        ("helm_release", {"name": "kueue"}, None),
        ("google_storage_bucket", None, None),
    ],
)
def test_a_resource_is_found_in_the_audit_log_by_what_its_state_and_the_entry_share(
    rtype: str, state: dict[str, Any] | None, terms: list[str] | None
) -> None:
    assert resource_terms(rtype, state) == terms


def test_who_changed_says_why_when_the_audit_log_cannot_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gcloud").write_text('#!/bin/bash\necho "PERMISSION_DENIED: logging.logEntries.list" >&2\nexit 1\n')
    (tmp_path / "gcloud").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    said = who_changed("p", "google_storage_bucket", {"id": "b"}, "deployer@p.iam.gserviceaccount.com")
    assert said == "who: the audit log could not be read (PERMISSION_DENIED: logging.logEntries.list)"
    assert who_changed("p", "helm_release", {"name": "x"}, "d").startswith("who: not looked up")
    query = audit_filter(["nodePools/train"], "d@p.iam.gserviceaccount.com")
    assert 'protoPayload.resourceName:"nodePools/train"' in query and query.startswith('logName:"cloudaudit')


def test_a_refresh_that_the_next_apply_leaves_alone_is_no_drift() -> None:
    """A server-side field changed (the refresh shows it) but the plan changes nothing: exit 0; the same refresh
    with the next apply changing it back: exit 2, the field named."""

    def entry(before: str, after: str) -> dict[str, Any]:
        return {
            "address": "google_storage_bucket.models", "mode": "managed", "type": "google_storage_bucket",
            "name": "models",
            "change": {"actions": ["update"], "before": {"storage_class": before}, "after": {"storage_class": after},
                       "after_unknown": {}},
        }  # fmt: skip

    plan: dict[str, Any] = {"format_version": "1.2", "resource_drift": [entry("STANDARD", "NEARLINE")]}
    code, lines = report("platform-dev", review_plan("platform-dev", {**plan, "resource_changes": []}))
    assert code == 0 and "nothing changed outside Terraform" in lines[0]
    code, lines = report(
        "platform-dev", review_plan("platform-dev", {**plan, "resource_changes": [entry("NEARLINE", "STANDARD")]})
    )
    assert code == 2 and lines[1] == "  update google_storage_bucket.models (storage_class)", lines
    assert lines[-1] == "the next apply would: update google_storage_bucket.models"


def test_a_drift_check_of_an_environment_never_applied_is_refused_with_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shown: dict[str, Any]
) -> None:
    """An empty state (never applied, or another backend) plans everything as new: no drift can be read from it."""
    from scripts import apply

    (tmp_path / "cdk.tf.json").write_text(json.dumps({"resource": {}}))
    assert apply.drift(tmp_path, "platform-dev") == 1
    said = capsys.readouterr().err
    assert "the environment was never applied" in said and "make deploy ENV=dev" in said, said
    shown["prior_state"] = {"values": {"root_module": {"child_modules": [{"resources": [{"mode": "managed"}]}]}}}
    assert apply.drift(tmp_path, "platform-dev") == 0
