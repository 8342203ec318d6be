"""Whether the planner server answers (GET /models) and how loaded it is (GET /metrics), for backend `openai`.

ROS-free: the node's timers call `check` and `report`; the Replan action is served from the first answer on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from brace_common.counters import Health

from .openai_client import ServerError
from .server_backend import ServerBackend
from .server_load import ServerLoad, ServerLoadProbe


class ServerProbe:
    """Whether the planner server answers GET /models (any HTTP answer), what it lists and when it was asked."""

    def __init__(self) -> None:
        self.answered = False
        self.models: list[str] = []
        self.error = "not asked yet"
        self.checked_at = 0.0

    def probe(self, backend: ServerBackend, timeout_s: float) -> None:
        """Ask once (blocks at most `timeout_s`)."""
        self.checked_at = time.monotonic()
        try:
            listing = backend.client.get_json("/models", time.monotonic() + timeout_s)
        except ServerError as exc:
            # An HTTP error is still an answer: the server runs (some list no models, or fail to list them).
            self.answered, self.models, self.error = exc.status > 0, [], str(exc)
            return
        data = listing.get("data")
        self.models = [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")] \
            if isinstance(data, list) else []
        self.answered, self.error = True, ""


@dataclass(frozen=True)
class LoadReport:
    """One server_load reading: the server's load when it gives one, and this planner's own requests there."""

    server_url: str
    own_requests: int
    load: Optional[ServerLoad] = None  # None: the server gives none (no /metrics, no known gauges, no answer)


class ServerWatch:
    """The probe and the load of one server backend; `period_s` is the probe's while the server has not answered;
    `log` (the node's logger) hears the first answer, each failed probe (throttled) and a server without load."""

    def __init__(self, backend: ServerBackend, timeout_s: float, period_s: float, load: bool, log) -> None:
        self.backend = backend
        self.log = log
        self.timeout_s = timeout_s
        self.period_s = period_s
        self.probe = ServerProbe()
        self.load_probe = ServerLoadProbe(backend.client, timeout_s) if load else None

    def check(self) -> bool:
        """Probe when due (5x less often once serving: calls report failures themselves); whether the server has
        answered (its first answer names the model the calls use when none is configured)."""
        probe = self.probe
        if probe.answered and time.monotonic() < probe.checked_at + 4 * self.period_s:
            return True
        first = not probe.answered
        probe.probe(self.backend, self.timeout_s)
        url = self.backend.client.base_url
        if probe.answered and first:
            if not self.backend.server_model:
                self.backend.server_model = probe.models[0] if probe.models else ""
            self.log.info(f"planner server {url} answers, serving model '{self.backend.server_model}' "
                          f"(listed: {probe.models[:5]})")
        elif not probe.answered:
            self.log.warning(f"planner server {url}: {probe.error}", throttle_duration_sec=10.0)
        return probe.answered

    def report(self) -> LoadReport:
        """The load now; a reading that finds the server publishes none at all is said once, and then
        `reports_load` is False (it is not asked again)."""
        load = self.load_probe.read()
        url = self.backend.client.base_url
        if self.load_probe.reports is False:
            self.log.info(f"planner server {url} publishes no load (GET /metrics): each controller sees only its "
                          "own calls there")
        return LoadReport(url, self.backend.at_server, load)

    def reports_load(self) -> bool:
        """Whether the load is still worth asking for (asked once of a server without gauges)."""
        return self.load_probe is not None and self.load_probe.reports is not False

    def health(self, active: bool) -> Health:
        """Whether the server answers (an error when it does not while the node is `active`), the load readings."""
        url = self.backend.client.base_url
        health = Health({"server.answers": self.probe.answered})
        if self.load_probe is not None:
            health += self.load_probe.health()
        if active and not self.probe.answered:
            health += Health(errors=(f"planner server {url} does not answer: {self.probe.error}",))
        return health
