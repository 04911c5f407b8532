"""Serve a canary checkpoint over HTTP: `python -m workloads.server --port 8000 --checkpoint-dir DIR`.

Reads the latest checkpoint `make train-local` (or the trainer in the cluster)
wrote under the directory; see `workloads/server/app.py` for the API. Logs one JSON line per request.
Exit codes: 0 stopped, 2 no checkpoint to serve.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from workloads.constants import DEFAULT_LOCAL_CKPT
from workloads.logs import configure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.server", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--checkpoint-dir", default=os.environ.get("CKPT_DIR") or DEFAULT_LOCAL_CKPT)
    parser.add_argument("--max-batch", type=int, default=8, help="requests decoded together in one step")
    parser.add_argument("--queue-size", type=int, default=64, help="waiting requests beyond which 429 is answered")
    parser.add_argument("--request-timeout", type=float, default=30.0, help="seconds before a request gets 503")
    args = parser.parse_args(argv)

    from aiohttp import web

    from workloads.server.app import make_app
    from workloads.server.engine import Engine, latest_checkpoint

    checkpoint_dir = Path(args.checkpoint_dir).absolute()
    try:
        latest_checkpoint(checkpoint_dir)
        engine = Engine(checkpoint_dir, max_batch=args.max_batch, queue_size=args.queue_size)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "serving": f"http://{args.host}:{args.port}",
                "checkpoint_dir": str(checkpoint_dir),
                "context": engine.context,
                "max_batch": args.max_batch,
                "queue_size": args.queue_size,
            }
        ),
        flush=True,
    )
    # One JSON line per request (aiohttp's access log) and per event, as Cloud Logging reads them.
    configure()
    web.run_app(
        make_app(engine, request_timeout=args.request_timeout),
        host=args.host,
        port=args.port,
        print=None,
        access_log=logging.getLogger("workloads.server.access"),
        access_log_format='%a "%r" %s %b %Tf',
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
