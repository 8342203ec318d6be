"""Samples and readers the viewer's tests share: a small warehouse state, a call, a decision, an .rrd read back
into rows, and which addresses a port listens on."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from brace_msgs.msg import PhaseTiming, ReplanCall, ReplanDecision, TriggerEvent
from builtin_interfaces.msg import Time
from rerun.chunk import RrdReader

from brace_common.vocabulary import Activity, Predicate
from brace_common.world_state import AgentActivity, Entity, Pose, Relation, WorldState, world_state_msg

S = 1_000_000_000


def warehouse(step: int, agent_at=(1.0, 2.0), with_cup: bool = True, action: str = "move_to") -> WorldState:
    entities = [Entity("agent_0", "robot", pose=Pose.planar(*agent_at)), Entity("agent_1", "robot", pose=Pose(5, 5)),
                Entity("shelf_0", "shelf", pose=Pose.planar(4.0, 2.0)), Entity("dock_0", "dock", pose=Pose(0, 6))]
    if with_cup:
        entities.append(Entity("cup_0", "object", "on_shelf", Pose.planar(4.0, 2.0)))
    agents = (AgentActivity("agent_0", Activity.EXECUTING, action, json.dumps({"target": "shelf_0"}), 0, 2),
              AgentActivity("agent_1", Activity.BLOCKED))
    return WorldState("warehouse", 0, step, tuple(entities), (Relation("agent_0", Predicate.NEAR, "agent_1"),), agents)


def state_msg(state: WorldState):
    return world_state_msg(state, Time(), "map")


def call(agent="agent_0", latency=3000.0, slo=4500.0, step=3, decision="d1"):
    msg = ReplanCall(call_id="c1", decision_id=decision, agent_id=agent, step=step, token_budget=256, slo_ms=slo,
                     tokens_before=1800, tokens_after=256, latency_ms=latency, slo_met=latency <= slo,
                     compressor="erecap", model="smollm2", backend="local")
    msg.phases = [PhaseTiming(phase="prefill", duration_ms=120.0, tokens_in=256),
                  PhaseTiming(phase="decode", duration_ms=900.0, tokens_out=20)]
    return msg


def decision(admitted=True, reason="gate_open", agent="agent_0", step=3, decision_id="d1"):
    trigger = TriggerEvent(agent_id=agent, kind=TriggerEvent.KIND_HAZARD, step=step, severity=0.5,
                           detail="min distance 0.3 m to agent_1")
    return ReplanDecision(decision_id=decision_id, trigger=trigger, admitted=admitted, reason=reason,
                          mode=ReplanDecision.MODE_PARTIAL_REPLAN if admitted else ReplanDecision.MODE_DEFER_REPLAN,
                          token_budget=256 if admitted else 0, slo_ms=4500.0 if admitted else 0.0,
                          predicted_p95_ms=float("nan"))


def read_rrd(path: Path) -> dict[str, list[dict]]:
    """entity path -> rows (each: its timelines and components as Python values)."""
    rows: dict[str, list[dict]] = {}
    for chunk in RrdReader(str(path)).stream():
        batch = chunk.to_record_batch()
        columns = {name: batch.column(name) for name in batch.schema.names if name != "rerun.controls.RowId"}
        for i in range(batch.num_rows):
            row = {}
            for name, column in columns.items():
                value = column[i]
                row[name] = value.value if hasattr(value, "value") and name.endswith("_time") else value.as_py()
            rows.setdefault(chunk.entity_path, []).append(row)
    for values in rows.values():    # static rows first, then in time order (chunks come in no particular order)
        values.sort(key=lambda r: (r.get("ros_time") is not None, r.get("ros_time") or 0, r.get("step") or 0))
    return rows


def column(rows: list[dict], name: str) -> list:
    """The values of component (or timeline) `name` in rows, in order (a batch of one: the value itself)."""
    values = [v for r in rows for k, v in r.items() if (k == name or k.endswith(f":{name}")) and v is not None]
    return [v[0] if isinstance(v, list) and len(v) == 1 else v for v in values]


def listening_addresses(port: int) -> set[str]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:   # LISTEN
                found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]) if len(address) == 8 else address)
    return found
