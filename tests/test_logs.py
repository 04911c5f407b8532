"""In-cluster processes log one JSON object per line, as Cloud Logging reads them."""

from __future__ import annotations

import json
import logging

import pytest

from workloads.logs import configure


def test_a_log_record_is_one_json_line_with_severity_message_and_its_fields(capsys: pytest.CaptureFixture[str]) -> None:
    configure()
    try:
        logging.getLogger("workloads.trainer").info("trainer done", extra={"seconds": 1.5, "result": {"step": 3}})
        logging.getLogger("workloads.trainer").error("trainer refused", extra={"error": "no slice"})
    finally:
        logging.getLogger().handlers.clear()
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(x["severity"], x["logger"], x["message"]) for x in lines] == [
        ("INFO", "workloads.trainer", "trainer done"),
        ("ERROR", "workloads.trainer", "trainer refused"),
    ]
    assert lines[0]["seconds"] == 1.5 and lines[0]["result"] == {"step": 3} and lines[1]["error"] == "no slice"
    assert lines[0]["time"].endswith("Z")
