"""Hold `vllm serve` arguments to the real vLLM: run with the vLLM environment's Python (`make vllm`,
.venv-vllm), never imported by the platform (it needs vLLM).

    .venv-vllm/bin/python scripts/vllm_cpu/check.py flags   every option of `vllm serve`, one per line
    .venv-vllm/bin/python scripts/vllm_cpu/check.py check   {"<name>": {"args": [...], "config": {...}}}
        on standard input; its last line of output: {"flags": [...], "results": {"<name>": {"unknown": [...],
        "abbreviated": [...], "error": "..." | null}}}

`check` does what `vllm serve` does with the arguments before it loads anything: vLLM's own parser
(`make_arg_parser(FlexibleArgumentParser())`), then `EngineArgs.from_cli_args(...).create_engine_config()`,
whose checks need no accelerator (tensor parallelism against the heads, the context against the model's
positions, ...). The model is a folder holding only the deployment's `config.json` (`config`); the TPU-only
flags (`skip`) are left out of the engine step. argparse accepts an unambiguous prefix of a flag
(`--max-num-seq` for `--max-num-seqs`), so every flag is first compared with the parser's full names:
`abbreviated` lists those that are only a prefix, `unknown` those that are neither.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any


def _parser() -> Any:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser())


def flags() -> list[str]:
    return sorted(s for s in _parser()._option_string_actions if s.startswith("--"))


def _names(args: list[str], known: list[str]) -> tuple[list[str], list[str]]:
    unknown: list[str] = []
    abbreviated: list[str] = []
    for arg in args:
        if not arg.startswith("--"):
            continue
        name = arg.split("=", 1)[0]
        if name in known:
            continue
        (abbreviated if any(k.startswith(name) for k in known) else unknown).append(name)
    return unknown, abbreviated


def check_one(args: list[str], config: dict[str, Any], skip: list[str], known: list[str]) -> dict[str, Any]:
    from vllm.engine.arg_utils import EngineArgs

    unknown, abbreviated = _names(args, known)
    out: dict[str, Any] = {"unknown": unknown, "abbreviated": abbreviated, "error": None}
    if unknown or abbreviated:
        return out
    with tempfile.TemporaryDirectory() as model:
        (Path(model) / "config.json").write_text(json.dumps(config))
        local = [a for a in args if a.split("=", 1)[0] not in skip]
        local = [f"--model={model}" if a.startswith("--model=") else a for a in local]
        said = io.StringIO()  # argparse writes its refusal to standard error, then exits
        try:
            with contextlib.redirect_stderr(said):
                namespace = _parser().parse_args(local)
            EngineArgs.from_cli_args(namespace).create_engine_config()
        except (Exception, SystemExit) as err:  # vLLM's refusal, whatever its type
            told = " ".join(line.strip() for line in said.getvalue().strip().splitlines()[-6:])
            out["error"] = f"{type(err).__name__}: {err}" + (f": {told}" if told else "")
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m scripts.vllm_cpu.check",
        description="Hold `vllm serve` arguments to the real vLLM (run with .venv-vllm's Python: `make vllm`).",
        epilog="Exit codes: 0 answered (refusals are in the verdict); 1 vLLM could not be imported; 2 usage.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("flags", help="every option of `vllm serve`, one per line")
    checking = sub.add_parser(
        "check", help='{"<name>": {"args", "config", "skip"}} on standard input -> the verdict, last line'
    )
    checking.add_argument(
        "--describe", action="store_true", help="the verdict with describe.py's description (one import of vLLM)"
    )
    args = parser.parse_args(argv)
    try:
        known = flags()
    except ImportError as err:
        print(f"error: the real vLLM is not importable here ({err}): run with .venv-vllm's Python", file=sys.stderr)
        return 1
    if args.command == "flags":
        print("\n".join(known))
        return 0
    request = json.loads(sys.stdin.read())
    results = {
        name: check_one(item["args"], item["config"], item.get("skip", []), known) for name, item in request.items()
    }
    verdict: dict[str, Any] = {"flags": known, "results": results}
    if args.describe:
        try:
            from scripts.vllm_cpu.describe import describe
        except ImportError:  # run as a script: its directory is on the path
            from describe import describe  # type: ignore[no-redef]
        verdict["description"] = describe()
    # vLLM logs to standard output too: the verdict is the last line.
    print(json.dumps(verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
