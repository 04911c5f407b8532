"""Saxml's HTTP server, driven from an environment's `serving.<key>` (engine saxml).

  python -m scripts.saxml publish   --env dev [--deployment saxml] [--url URL]
  python -m scripts.saxml list      --env dev
  python -m scripts.saxml generate  --env dev --prompt "How many days are in a week?"
  python -m scripts.saxml unpublish --env dev

The model is published as `<cell>/<model name>` with the deployment's model
class and checkpoint, one replica per slice. URL is the HTTP server's address
(`SAXML_URL`; for the internal load balancer, port-forward
`svc/serve-<key>-http 8888`). Prints the server's JSON answer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

from infra.config import ENVIRONMENTS_DIR, ConfigError, SaxmlServing
from infra.synth.load import load_named


def model_id(key: str, name: str) -> str:
    return f"/sax/{key}/{name}"


def requests_for(action: str, key: str, d: SaxmlServing, prompt: str | None) -> tuple[str, str, dict[str, Any]]:
    """(HTTP method, path, JSON body) of one action against the Saxml HTTP server."""
    model = model_id(key, d.model.name)
    if action == "publish":
        body = {"model": model, "model_path": d.model_class, "checkpoint": d.checkpoint, "replicas": len(d.slices)}
        return "POST", "/publish", body
    if action == "list":
        return "GET", "/listcell", {"model": model}
    if action == "generate":
        if not prompt:
            raise ValueError("generate needs --prompt")
        return "POST", "/generate", {"model": model, "query": prompt}
    if action == "unpublish":
        return "POST", "/unpublish", {"model": model}
    raise ValueError(f"unknown action {action!r}; actions: publish, list, generate, unpublish")


def call(url: str, method: str, path: str, body: dict[str, Any], timeout: float = 600) -> Any:
    request = urllib.request.Request(
        url.rstrip("/") + path,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"{method} {path}: HTTP {err.code}: {err.read().decode()[:500]}") from None
    except urllib.error.URLError as err:
        raise RuntimeError(f"cannot reach the Saxml HTTP server at {url}: {err.reason}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.saxml",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["publish", "list", "generate", "unpublish"])
    parser.add_argument("--env", required=True)
    parser.add_argument("--deployment", default="saxml", help="the key under `serving` (default saxml)")
    parser.add_argument("--url", default=os.environ.get("SAXML_URL", "http://127.0.0.1:8888"))
    parser.add_argument("--prompt", default=os.environ.get("PROMPT"))
    args = parser.parse_args(argv)
    try:
        env = load_named(args.env, ENVIRONMENTS_DIR)
        d = env.serving.get(args.deployment)
        if not isinstance(d, SaxmlServing):
            saxml = [k for k, v in env.serving.items() if isinstance(v, SaxmlServing)]
            raise ValueError(
                f"environment {env.name!r} has no Saxml deployment {args.deployment!r}; Saxml deployments: "
                f"{', '.join(saxml) or '(none)'}"
            )
        method, path, body = requests_for(args.action, args.deployment, d, args.prompt)
        answer = call(args.url, method, path, body)
    except (ConfigError, ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"action": args.action, "request": body, "answer": answer}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
