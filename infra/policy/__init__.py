"""Policy gate: Checkov over the synthesized stacks, with written reasons for every skip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SKIPS_FILE = Path(__file__).parent / "checkov-skips.yaml"


@dataclass(frozen=True)
class Finding:
    check_id: str
    name: str
    stack: str
    resource: str

    def __str__(self) -> str:
        return f"{self.check_id} {self.stack} {self.resource}: {self.name}"


@dataclass(frozen=True)
class PolicyResult:
    failed: list[Finding]
    skipped_ids: set[str]
    stale_skips: list[str]
    passed: int

    @property
    def ok(self) -> bool:
        return not self.failed and not self.stale_skips


def load_skips(path: Path = SKIPS_FILE) -> dict[str, str]:
    """The skip list as {check id: reason}; every entry must carry a reason."""
    data = yaml.safe_load(path.read_text()) or {}
    skips: dict[str, str] = {}
    for i, entry in enumerate(data.get("skips") or []):
        check_id = str(entry.get("id", "")).strip()
        reason = str(entry.get("reason") or "").strip()
        if not check_id or not reason:
            raise ValueError(f"{path}: skips[{i}]: every skip needs an `id` and a written `reason`")
        if check_id in skips:
            raise ValueError(f"{path}: skips[{i}]: {check_id} is listed twice")
        skips[check_id] = reason
    return skips


REPO = Path(__file__).resolve().parents[2]


def _checkov_python() -> str:
    """The Python of Checkov's own environment (`make venv` builds .venv-policy), else of the `checkov` on PATH."""
    local = REPO / ".venv-policy" / "bin" / "checkov"
    found = str(local) if local.exists() else shutil.which("checkov")
    if found is None:
        raise RuntimeError("checkov is not installed: run `make venv` (it builds .venv-policy)")
    beside = Path(found).with_name("python")
    if beside.exists():
        return str(beside)
    shebang = Path(found).read_text().splitlines()[0]
    return shebang[2:].strip() if shebang.startswith("#!") else sys.executable


SCAN = Path(__file__).with_name("checkov_scan.py")


# Stacks per Checkov process: past that many, the stacks are split among processes (one per core at most); a process
# costs about 1.2 s of importing Checkov, a stack 0.2 s (Kubernetes) to 0.65 s (Terraform) on the 2-core machine.
STACKS_PER_PROCESS = 8


def checkov_reports(directory: Path, framework: str) -> list[dict[str, Any]]:
    """Checkov's reports (shaped as `checkov -o json`'s) for every file of `framework` under `directory`: each
    stack's folder (`directory/<stack>/`) scanned on its own (see checkov_scan.py for why)."""
    folders = sorted(str(p) for p in directory.iterdir() if p.is_dir()) or [str(directory)]
    count = max(1, min(os.cpu_count() or 1, -(-len(folders) // STACKS_PER_PROCESS)))
    python = _checkov_python()
    processes = [
        subprocess.Popen(
            [python, str(SCAN), framework, *folders[i::count]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    # Every process waited for before any output is judged: none is left running behind an error.
    outputs = [process.communicate() for process in processes]
    reports: list[dict[str, Any]] = []
    for stdout, stderr in outputs:
        try:
            reports += json.loads(stdout)
        except json.JSONDecodeError:
            codes = ", ".join(str(p.returncode) for p in processes)
            raise RuntimeError(f"checkov did not produce a report (exits {codes}):\n{stderr[-2000:]}") from None
    return reports


def run_checkov(stacks_dir: Path, skips: dict[str, str]) -> PolicyResult:
    """Scan every `stacks/<name>/cdk.tf.json` under `stacks_dir`, each stack on its own, in one Checkov process.

    Checkov runs every check; failures of a skipped check are set aside here,
    so a skip that no stack fails any more is reported as stale.
    """
    reports = checkov_reports(stacks_dir, "terraform_json")
    failed: list[Finding] = []
    skipped: set[str] = set()
    passed = 0
    for report in reports:
        results = report.get("results", {})
        passed += len(results.get("passed_checks", []))
        for check in results.get("failed_checks", []):
            if check["check_id"] in skips:
                skipped.add(check["check_id"])
                continue
            stack = Path(check["file_path"]).parent.name
            failed.append(Finding(check["check_id"], check["check_name"], stack, check["resource"]))
    if passed == 0 and not failed:
        raise RuntimeError(f"checkov scanned nothing under {stacks_dir}; run `make synth` first")
    stale = sorted(set(skips) - skipped)
    return PolicyResult(failed=sorted(failed, key=str), skipped_ids=skipped, stale_skips=stale, passed=passed)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m infra.policy",
        description=(
            "Checkov on the synthesized stacks and on every rendered chart release (Kubernetes checks); every skip "
            "has its reason in infra/policy/checkov-skips.yaml."
        ),
        epilog="Exit codes: 0 every check passed or is skipped with a reason, 1 a failed check or a stale skip.",
    )
    parser.add_argument("stacks", nargs="?", type=Path, default=Path("cdktf.out/stacks"), help="cdktf.out/stacks")
    parser.add_argument(
        "--partial",
        action="store_true",
        help="only some environments' stacks are here (make plan ENV=): a skip none of them needs is not stale",
    )
    parser.add_argument(
        "--rendered",
        type=Path,
        default=None,
        help="read the releases from this folder (<outdir>/rendered, which make plan's rules step writes) instead of "
        "rendering them again",
    )
    args = parser.parse_args(argv)
    stacks_dir, partial = args.stacks, args.partial
    skips = load_skips()
    # The two gates are two Checkov processes: run side by side (each is most of the policy step's time).
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:
        terraform = pool.submit(run_checkov, stacks_dir, skips)
        kubernetes = pool.submit(_kubernetes_checks, stacks_dir, args.rendered)
        result = terraform.result()
        releases, k8s_skips, k8s_result = kubernetes.result()
    print(f"policy: {result.passed} checks passed, {len(result.failed)} failed, {len(skips)} skipped with reasons")
    for finding in result.failed:
        print(f"  FAILED {finding}")
    for check_id in [] if partial else result.stale_skips:
        print(f"  STALE SKIP {check_id}: no stack fails it any more; remove it from {SKIPS_FILE}")
    ok = not result.failed if partial else result.ok
    k8s_ok = _report_kubernetes(releases, k8s_skips, k8s_result, partial=partial)
    return 0 if ok and k8s_ok else 1


def _kubernetes_checks(stacks_dir: Path, rendered: Path | None) -> tuple[int, list[Any], PolicyResult]:
    """Checkov's Kubernetes checks on every rendered chart release: (releases, skips, result)."""
    import tempfile

    from infra.policy.kubernetes import load_kubernetes_skips, run_checkov_kubernetes, write_manifests

    skips = load_kubernetes_skips()
    with tempfile.TemporaryDirectory(prefix="policy-manifests-") as tmp:
        releases = write_manifests(stacks_dir, Path(tmp), rendered)
        result = run_checkov_kubernetes(Path(tmp), skips)
    return releases, skips, result


def _report_kubernetes(releases: int, skips: list[Any], result: PolicyResult, *, partial: bool = False) -> bool:
    """Print the Kubernetes gate's outcome; True when nothing failed (and, for every stack, no skip is stale)."""
    print(
        f"policy (Kubernetes, {releases} rendered releases): {result.passed} checks passed, {len(result.failed)} "
        f"failed, {len(skips)} skipped with reasons"
    )
    for finding in result.failed:
        print(f"  FAILED {finding}")
    for skip in [] if partial else result.stale_skips:
        print(f"  STALE SKIP {skip}: no rendered object fails it any more; remove it from {SKIPS_FILE}")
    return not result.failed if partial else result.ok


if __name__ == "__main__":
    sys.exit(main())
