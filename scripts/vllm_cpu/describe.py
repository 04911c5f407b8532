"""Describe `vllm serve`'s options and the value checks vLLM applies to them, from the real vLLM: run with the vLLM
environment's Python (`make vllm-options`, .venv-vllm), never imported by the platform (it needs vLLM).

    .venv-vllm/bin/python scripts/vllm_cpu/describe.py > infra/catalogue/vllm-serve-options.json

The description is checked in; `make plan` holds every deployment's arguments to it (rule vllm.args-valid,
infra/rules/vllm_serve_args.py) without the multi-gigabyte vLLM environment, and tests/test_vllm.py regenerates it and
compares. For each option: its value kind as vLLM's parser converts it (none for a boolean flag, int, float, str,
json, json-or-str, human-int), its choices, whether "None" is taken, and the bounds its config dataclass field
declares (pydantic's gt/ge/lt/le); then the cross-field checks of vLLM's config validators the platform can
express. Every check is confirmed here on a value vLLM must refuse: the generator fails if vLLM accepts it, and
records vLLM's own words.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import inspect
import io
import json
import sys
from typing import Any

# Value kinds by the name of the function vLLM's parser converts with (vllm/engine/arg_utils.py,
# vllm/utils/argparse_utils.py).
KINDS = {
    "int": "int",
    "float": "float",
    "str": "str",
    "loads": "json",
    "parse_dataclass": "json",  # a config dataclass, from a JSON object
    "union_dict_and_str": "json-or-str",
    "human_readable_int": "human-int",
    "human_readable_int_or_auto": "human-int-or-auto",
}


def _inner(fn: Any) -> Any:
    """The type an optional_type/parse_type wrapper converts with, unwrapped."""
    while getattr(fn, "__name__", "") in ("_optional_type", "_parse_type") and fn.__closure__:
        fn = fn.__closure__[0].cell_contents
    return fn


def _kind(action: argparse.Action) -> tuple[str, bool]:
    """(value kind, whether '' and 'None' read as None)."""
    if action.nargs == 0:
        return "none", False
    optional = getattr(action.type, "__name__", "") == "_optional_type"
    fn = _inner(action.type)
    if fn is None:
        return "str", optional
    return KINDS.get(getattr(fn, "__name__", ""), "any"), optional


def _bounds() -> dict[str, dict[str, Any]]:
    """Field name -> {gt, ge, lt, le, source} of vLLM's config dataclasses (pydantic Field constraints); a name
    two classes bound differently is left out."""
    import annotated_types
    import vllm.config as config

    found: dict[str, dict[str, Any]] = {}
    clash: set[str] = set()
    for _, cls in sorted(inspect.getmembers(config, inspect.isclass)):
        fields = getattr(cls, "__pydantic_fields__", None)
        if not fields or not cls.__module__.startswith("vllm.config"):
            continue
        for name, info in fields.items():
            bound: dict[str, Any] = {}
            for meta in info.metadata:
                for op in ("gt", "ge", "lt", "le"):
                    if isinstance(meta, getattr(annotated_types, op.capitalize())):
                        bound[op] = getattr(meta, op)
            if not bound:
                continue
            bound["source"] = f"{cls.__module__.replace('.', '/')}.py {cls.__name__}.{name}"
            if name in found and {k: v for k, v in found[name].items() if k != "source"} != {
                k: v for k, v in bound.items() if k != "source"
            }:
                clash.add(name)
            found.setdefault(name, bound)
    return {k: v for k, v in found.items() if k not in clash}


def _refusal(parser: Any, args: list[str], engine: bool) -> str | None:
    """vLLM's words refusing `args` (the parser, then with `engine` the config validators), or None if accepted."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            namespace = parser.parse_args(["--model=Qwen/Qwen3-0.6B", *args])
        if engine:
            from vllm.config import SchedulerConfig

            SchedulerConfig(
                max_num_batched_tokens=namespace.max_num_batched_tokens,
                max_num_seqs=namespace.max_num_seqs,
                max_model_len=8192,
                is_encoder_decoder=False,
            )
    except SystemExit:
        lines = [line.strip() for line in said.getvalue().strip().splitlines() if "error:" in line]
        return lines[-1].split("error: ", 1)[-1] if lines else "refused"
    except Exception as err:  # vLLM's refusal, whatever its type
        return " ".join(str(err).split())
    return None


# The cross-field checks of vLLM's config validators that hold on the arguments alone (no model, no device).
CROSS_CHECKS: list[dict[str, Any]] = [
    {
        "id": "max-num-seqs-within-batched-tokens",
        "left": "--max-num-seqs",
        "op": "<=",
        "right": "--max-num-batched-tokens",
        "source": "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len",
        "probe": ["--max-num-seqs=9", "--max-num-batched-tokens=4"],
    },
]


def describe() -> dict[str, Any]:
    try:  # the same parser the tests hold the arguments to
        from scripts.vllm_cpu import check as vllm_check
    except ImportError:  # run as a script: its directory is on the path
        import check as vllm_check  # type: ignore[no-redef]

    parser = vllm_check._parser()
    bounds = _bounds()
    options: dict[str, Any] = {}
    for action in parser._actions:
        names = [s for s in action.option_strings if s.startswith("--")]
        if not names or action.dest == "help":
            continue
        kind, optional = _kind(action)
        entry: dict[str, Any] = {"dest": action.dest, "value": kind}
        if optional:
            entry["none_allowed"] = True
        if action.nargs not in (None, 0):
            entry["nargs"] = action.nargs
        if action.choices is not None:
            entry["choices"] = sorted(str(c) for c in action.choices)
        if action.dest in bounds and kind in ("int", "float", "human-int"):
            entry["bounds"] = bounds[action.dest]
        for name in names:
            options[name] = entry
    # Confirm the description on values vLLM must refuse: a boolean given a value, a non-integer int, a
    # choice it does not have, truncated JSON, a bound crossed.
    probes = {
        "none": ["--enable-prefix-caching=true"],
        "int": ["--seed=1.5"],
        "choices": ["--dtype=bf16"],
        "json": ['--kv-transfer-config={"kv_connector":'],
        "bounds": ["--gpu-memory-utilization=1.5"],
    }
    confirmed: dict[str, str] = {}
    for what, args in probes.items():
        engine = what == "bounds"
        said = _refusal(parser, args, engine=False)
        if said is None and engine:
            from vllm.config import CacheConfig

            try:
                CacheConfig(gpu_memory_utilization=1.5)
            except Exception as err:
                said = " ".join(str(err).split())[:300]
        if said is None:
            raise SystemExit(f"vLLM accepted {args}: the description's {what} check does not hold")
        confirmed[what] = f"{' '.join(args)}: {said[:300]}"
    checks = []
    for check in CROSS_CHECKS:
        said = _refusal(parser, check["probe"], engine=True)
        if said is None:
            raise SystemExit(f"vLLM accepted {check['probe']}: check {check['id']} does not hold")
        checks.append({**{k: v for k, v in check.items() if k != "probe"}, "vllm_says": said[:300]})
    return {
        "vllm": importlib.metadata.version("vllm-cpu"),
        "generated_by": "make vllm-options (scripts/vllm_cpu/describe.py, from .venv-vllm)",
        "options": dict(sorted(options.items())),
        "checks": checks,
        "confirmed": confirmed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.vllm_cpu.describe",
        description="Describe `vllm serve`'s options and value checks as JSON on standard output, from the real "
        "vLLM (run with .venv-vllm's Python: `make vllm-options`).",
        epilog="Exit codes: 0 described; 1 vLLM could not be imported; 2 usage; a check vLLM does not hold exits "
        "with its message.",
    )
    parser.parse_args(argv)
    try:
        description = describe()
    except ImportError as err:
        print(f"error: the real vLLM is not importable here ({err}): run with .venv-vllm's Python", file=sys.stderr)
        return 1
    print(json.dumps(description, indent=1, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
