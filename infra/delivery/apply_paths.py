"""The local files a stack's apply opens, resolved the way Terraform resolves them.

The helm provider opens a local release's `chart` and its `postrender.binary_path` relative to Terraform's working
directory, which is the stack's folder (cdktf runs Terraform in `<output>/stacks/<stack>`, and so does
scripts/apply.py). The stacks write those paths relative to the repository root three folders up
(infra/constructs/releases.py: `../../../workloads/charts/<name>`), so an output folder that is not a direct child of
the repository root (a temporary folder, say) leaves every local release pointing at nothing, and the apply fails at
its first release. `output_folder` makes a folder where they resolve; `unresolved` says which do not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infra import settings
from infra.constructs.releases import REPO


def opened_paths(stack: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(release address, field, path as written) of every local file the stack's helm releases open."""
    opened = []
    for key, release in sorted((stack.get("resource", {}).get("helm_release") or {}).items()):
        address = f"helm_release.{key} ({release.get('name', key)})"
        if "repository" not in release:  # a chart from a repository is fetched, not opened
            opened.append((address, "chart", str(release["chart"])))
        postrender = release.get("postrender")
        for block in postrender if isinstance(postrender, list) else [postrender] if postrender else []:
            opened.append((address, "postrender.binary_path", str(block["binary_path"])))
    return opened


def unresolved(stack_dir: Path, stack: dict[str, Any]) -> list[str]:
    """Why each local file the apply of `stack` (synthesized in `stack_dir`) opens is missing there (empty: all
    resolve): a chart is a folder with a Chart.yaml, a post-renderer an executable file."""
    problems = []
    for address, field, path in opened_paths(stack):
        resolved = (stack_dir / path).resolve()
        if field == "chart":
            found = (resolved / "Chart.yaml").is_file()
            wanted = "a chart folder (with a Chart.yaml)"
        else:
            found = resolved.is_file() and os.access(resolved, os.X_OK)
            wanted = "an executable file"
        if not found:
            problems.append(f"{address}: {field} {path!r} resolves to {resolved}, which is not {wanted}")
    return problems


def output_folder(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary synth output folder where the stacks' relative paths resolve: a direct child of the repository
    root (ignored by git: `.cdktf.out-*/`)."""
    return tempfile.TemporaryDirectory(prefix=f".cdktf.out-{prefix}-", dir=REPO)


@contextlib.contextmanager
def synth_folder(prefix: str, *, keep: bool) -> Iterator[str]:
    """`output_folder`, or with `keep` (a dry run) `.cdktf.out-dry-run-<prefix>/` at the repository root (or the
    `.cdktf.out-*` folder PLATFORM_DRY_RUN_DIR names there), emptied first and left for the person to read: the
    stack exactly as the deploy would apply it."""
    if not keep:
        with output_folder(prefix) as tmp:
            yield tmp
        return
    kept = REPO / (settings.DRY_RUN_DIR.raw() or f".cdktf.out-dry-run-{prefix}")
    if kept.parent != REPO or not kept.name.startswith(".cdktf.out-"):
        raise ValueError(f"{settings.DRY_RUN_DIR.name}={kept.name!r}: a .cdktf.out-* folder at the repository root")
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir()
    yield str(kept)
