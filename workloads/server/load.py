"""A load generator for the canary server: N requests at concurrency C; every answer is counted.

Used by `make bench` (requests/s and latency percentiles) and by the tests
(a burst larger than the queue: every request must get an answer).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoadResult:
    sent: int
    codes: Counter[int] = field(default_factory=Counter)
    latencies_ok: list[float] = field(default_factory=list)
    latencies_rejected: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # transport failures: no HTTP answer at all
    wall_s: float = 0.0

    @property
    def answered(self) -> int:
        return sum(self.codes.values())

    def summary(self) -> dict[str, Any]:
        ok = sorted(self.latencies_ok)
        rejected = sorted(self.latencies_rejected)
        return {
            "sent": self.sent,
            "answered": self.answered,
            "codes": {str(k): v for k, v in sorted(self.codes.items())},
            "no_answer": len(self.errors),
            "ok_per_s": round(self.codes.get(200, 0) / self.wall_s, 2) if self.wall_s else None,
            "p50_ms": round(percentile(ok, 50) * 1000, 1) if ok else None,
            "p99_ms": round(percentile(ok, 99) * 1000, 1) if ok else None,
            "rejected_p99_ms": round(percentile(rejected, 99) * 1000, 1) if rejected else None,
            "wall_s": round(self.wall_s, 2),
        }


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


async def run_load(
    url: str, *, requests: int, concurrency: int, prompt: str, max_tokens: int, timeout: float = 120.0
) -> LoadResult:
    import aiohttp

    result = LoadResult(sent=requests)
    semaphore = asyncio.Semaphore(concurrency)
    body = {"prompt": prompt, "max_tokens": max_tokens}

    async def one(session: aiohttp.ClientSession) -> None:
        async with semaphore:
            began = time.monotonic()
            try:
                async with session.post(f"{url}/generate", json=body) as response:
                    await response.read()
                    result.codes[response.status] += 1
                    spent = time.monotonic() - began
                    (result.latencies_ok if response.status == 200 else result.latencies_rejected).append(spent)
            except (aiohttp.ClientError, TimeoutError) as err:
                result.errors.append(repr(err))

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        began = time.monotonic()
        await asyncio.gather(*(one(session) for _ in range(requests)))
        result.wall_s = time.monotonic() - began
    return result
