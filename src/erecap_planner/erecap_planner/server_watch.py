"""Whether the planner server answers (GET /models) and how loaded it is (GET /metrics), for backend `openai`.

ROS-free: the node's timers call `probe` and `load`; the Replan action is served from the first answer on.
"""

from __future__ import annotations

import time
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


class ServerWatch:
    """The probe and the load of one server backend; `period_s` is the probe's while the server has not answered."""

    def __init__(self, backend: ServerBackend, timeout_s: float, period_s: float, load: bool) -> None:
        self.backend = backend
        self.timeout_s = timeout_s
        self.period_s = period_s
        self.probe = ServerProbe()
        self.load_probe = ServerLoadProbe(backend.client, timeout_s) if load else None

    def check(self) -> Optional[tuple[str, bool]]:
        """Probe when due (5x less often once serving: calls report failures themselves). Returns (what to log,
        whether it is the first answer), or None when nothing is new to say."""
        probe = self.probe
        if probe.answered and time.monotonic() < probe.checked_at + 4 * self.period_s:
            return None
        first = not probe.answered
        probe.probe(self.backend, self.timeout_s)
        url = self.backend.client.base_url
        if probe.answered and first:
            if not self.backend.server_model:
                self.backend.server_model = probe.models[0] if probe.models else ""
            return (f"planner server {url} answers, serving model '{self.backend.server_model}' "
                    f"(listed: {probe.models[:5]})"), True
        if not probe.answered:
            return f"planner server {url}: {probe.error}", False
        return None

    def load(self) -> tuple[Optional[ServerLoad], bool]:
        """The server's load now (None: it gives none) and whether this reading found it publishes none at all."""
        probe = self.load_probe
        load = probe.read()
        return load, probe.reports is False

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
