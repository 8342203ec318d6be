"""The action schema a world publishes (WorldInfo): checked, then the call path's from the next call on.

ROS-free. Untrusted input: a malformed, oversized or combinatorial schema (or none) raises InvalidInput and the one
in use stays. `known` is set once the call path has a schema, the file's or a world's; a call waits on it.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Optional

from brace_common.action_schema import ActionSchema
from brace_common.counters import Counters, Health
from brace_common.validation import InvalidInput

from .call_path import CallPath


class WorldSchema:
    """The world's schema in use, where it came from, and whether any schema is known yet; `log` is the node's
    logger (a new schema said at INFO, a schema refused by an unexpected error at ERROR with its trace)."""

    def __init__(self, log) -> None:
        self.log = log
        self.path: Optional[CallPath] = None
        self.planner_schema: Callable[[ActionSchema], ActionSchema] = lambda schema: schema
        self.json = ""    # the world's schema in use (WorldInfo.action_schema_json); "" = none yet
        self.source = ""  # "<world> episode <n>" of that WorldInfo
        self.logged: tuple = ()  # (world, episode, actions, agents) last described at INFO
        self.known = threading.Event()
        self.counts = Counters(("schema_updates",))

    def use(self, path: CallPath, planner_schema: Callable[[ActionSchema], ActionSchema]) -> None:
        """Give the schemas worlds publish to `path` (at configure; `planner_schema` adds store_memory)."""
        self.path, self.planner_schema = path, planner_schema
        self.json, self.source = "", ""
        if path.schema is not None:
            self.known.set()
        else:
            self.known.clear()

    def offer(self, world: str, episode: int, schema_json: str, agents: int) -> None:
        """A world's schema: used from the next call on when it changed; InvalidInput when refused (an error no
        check foresaw is refused as `unexpected_error`: a latched schema must not kill the planner at every
        restart)."""
        try:
            said = self._offer(world, episode, schema_json, agents)
        except InvalidInput:
            raise
        except Exception as exc:  # noqa: BLE001 - counted apart by the caller and logged with its trace here
            self.log.error("world_info: schema refused by an unexpected error\n"
                           + "".join(traceback.format_exception(exc)))
            raise InvalidInput("unexpected_error", f"{type(exc).__name__}: {exc}") from None
        if said is not None:
            (self.log.info if said[1] else self.log.debug)(said[0])

    def _offer(self, world: str, episode: int, schema_json: str, agents: int) -> Optional[tuple[str, bool]]:
        """`offer`'s work: (what to log, whether at INFO) for a new schema, None for the one in use."""
        if schema_json == self.json:
            return None
        if not schema_json:
            raise InvalidInput("no_action_schema", f"world '{world}' publishes no action schema: set "
                               "action_schema_file")
        try:
            schema = ActionSchema.from_json(schema_json)  # bounded before it is parsed
            if self.path is None:
                return None
            self.path.set_schema(self.planner_schema(schema))  # a store_memory skill, too many calls
        except InvalidInput:
            raise
        except ValueError as exc:  # PlanError, a store_memory clash, the decoding's refusal
            raise InvalidInput("malformed_schema", str(exc)) from None
        self.json, self.source = schema_json, f"{world} episode {episode}"
        self.counts.add("schema_updates")
        self.known.set()
        # A world whose choices follow its state (TextWorld's admissible commands) republishes every step: INFO only
        # when the world, episode, actions or agents change.
        described = (world, episode, tuple(schema.actions), agents)
        at_info, self.logged = described != self.logged, described
        return f"action schema of {self.source}: {agents} agents, actions {', '.join(schema.actions)}", at_info

    def health(self) -> Health:
        """The schema updates taken."""
        return self.counts.health()
