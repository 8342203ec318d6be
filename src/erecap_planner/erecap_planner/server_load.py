"""The planner server's load as it reports it: requests running and waiting, from its Prometheus /metrics.

Serving engines publish how many requests they are working on and how many
wait for a slot. A fleet's robots share one server, so each robot's
controller must see the other robots' calls there: they are the backlog its
own call waits behind (llama.cpp slots, vLLM / SGLang batches share the
compute). The planner node polls the gauges (`ServerLoadProbe`) and publishes
them with its own calls at the server (brace_msgs/ServerLoad); the controller
counts the rest as calls ahead of its own.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Optional

from brace_common.counters import Counters, Health

from .openai_client import REASONS, OpenAIClient, ServerError

LOAD_GAUGES: dict[str, tuple[str, str]] = {
    "llama.cpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
    "vLLM": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    "SGLang": ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
}
"""Per engine, the Prometheus gauges of (requests running, requests waiting for a slot)."""

METRICS_PATH = "/metrics"  # from the server's root, outside the OpenAI API prefix (/v1)


@dataclass(frozen=True)
class ServerLoad:
    """Requests a planner server is running and holding in its queue, by the gauges of `engine`."""

    running: int
    waiting: int
    engine: str

    @property
    def requests(self) -> int:
        """Every request the server holds."""
        return self.running + self.waiting


def _sample(line: str) -> Optional[tuple[str, float]]:
    """(metric name, value) of one exposition line (`name{labels} value [timestamp]`); None for comments, blanks
    and lines that are not samples."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    name, labelled, rest = line.partition("{")
    if labelled and " " not in name:
        rest = rest[rest.rfind("}") + 1:]
    else:
        name, _, rest = line.partition(" ")
    fields = rest.split()
    try:
        return (name, float(fields[0])) if name and fields else None
    except ValueError:
        return None


def samples(text: str) -> dict[str, float]:
    """Every finite, non-negative sample of a Prometheus text exposition by metric name (labelled samples of one
    metric summed, e.g. vLLM's per engine core)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        sample = _sample(line)
        if sample is not None and math.isfinite(sample[1]) and sample[1] >= 0:
            values[sample[0]] = values.get(sample[0], 0.0) + sample[1]
    return values


def parse_load(text: str) -> Optional[ServerLoad]:
    """The load in a Prometheus text exposition: the first engine whose running gauge is present (no waiting gauge:
    none waiting); None when no engine's gauges are there."""
    values = samples(text)
    for engine, (running, waiting) in LOAD_GAUGES.items():
        if running in values:
            return ServerLoad(int(round(values[running])), int(round(values.get(waiting, 0.0))), engine)
    return None


class ServerLoadProbe:
    """Reads a planner server's load from GET /metrics (thread-safe); remembers whether it reports one at all."""

    def __init__(self, client: OpenAIClient, timeout_s: float):
        self.client = client
        self.timeout_s = timeout_s
        self.reports: Optional[bool] = None  # None: not asked yet; False: the server publishes no load gauges
        self.counts = Counters([f"server_load.{r}" for r in REASONS] + ["server_load.readings", "server_load.no_gauges"])
        self._lock = threading.Lock()

    def read(self) -> Optional[ServerLoad]:
        """The server's load now; None when it gives none (no /metrics, no known gauges, or no answer)."""
        try:
            text = self.client.get_text(METRICS_PATH, time.monotonic() + self.timeout_s)
        except ServerError as exc:
            with self._lock:
                self.counts[f"server_load.{exc.reason}"] += 1  # under the probe's lock
                if exc.status in (404, 501):  # the server answered: it has no metrics endpoint
                    self.reports = False
            return None
        load = parse_load(text)
        with self._lock:
            self.reports = load is not None
            self.counts["server_load.readings" if load is not None else "server_load.no_gauges"] += 1
        return load

    def health(self, prefix: str = "server_load.") -> Health:
        """Whether the server reports its load, the readings and the failures by reason (those counted, as values)."""
        with self._lock:
            nonzero = {k: v for k, v in sorted(self.counts.items()) if v}
        return Health({f"{prefix}reported": self.reports, **nonzero})
