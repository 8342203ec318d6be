"""A bag as a Rerun recording: every shown message through `ViewMapping`, at its log time, into an .rrd beside it.

A damaged bag (a recorder that was killed, a cut or corrupt file) is shown as far as it reads: the recording ends
where reading stopped and its event log says what was lost (an ERROR row at the last message read).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import rerun as rr

from .audit_recorder_node import message_class
from .bag import read_bag
from .recorded_types import RecordedTypes
from .view_mapping import ViewMapping, blueprint

APPLICATION_ID = "brace"
"""The Rerun application every BRACE-ROS recording belongs to (live and replayed)."""
FILE_BATCHING = rr.ChunkBatcherConfig(flush_tick=3600.0, flush_num_bytes=256 * 1024 * 1024, flush_num_rows=2 ** 31)
"""A file is written at once: one chunk per entity path, as far as size allows, instead of one every few ms (a web
viewer ingests a file chunk by chunk, a few per frame; a software-rendered frame is slow)."""


@dataclass
class ViewFile:
    """What `bag_to_rrd` wrote."""

    rrd: Path
    shown: int          # messages logged
    last_step: int      # the step timeline's last value anything was logged at (-1: none)
    skipped: int        # messages of shown topics that did not decode or were malformed
    damage: str         # the bag's damage in words ('' when intact)


def rrd_path(bag: Path) -> Path:
    """Where a bag's recording goes: beside it, `<bag>.rrd`."""
    return bag.with_name(bag.name + ".rrd") if bag.is_dir() else bag.with_suffix(".rrd")


def recording_name(bag: Path) -> str:
    """The recording's id: the variant of brace-run's layout (`<run>/<variant>/bag`), else the bag's name."""
    return bag.parent.name if bag.name == "bag" else bag.stem


def bag_to_rrd(bag: Path, rrd: Path | None = None) -> ViewFile:
    """Write the recording of `bag` to `rrd` (default `rrd_path(bag)`); BagError / OSError when nothing reads."""
    contents = read_bag(bag)
    out = rrd or rrd_path(bag)
    rec = rr.RecordingStream(APPLICATION_ID, recording_id=recording_name(bag), batcher_config=FILE_BATCHING)
    rec.save(out, default_blueprint=blueprint())
    mapping = ViewMapping(rec)
    recorded, skipped = RecordedTypes(contents.definitions), 0
    last_ns = 0
    for m in contents.messages:
        topic = m.topic.rsplit("/", 1)[-1]
        if topic not in ViewMapping.TOPICS:
            continue
        try:
            msg, _ = recorded.read(m.type, m.data, message_class(m.type))
        except (KeyError, ValueError, AttributeError, ImportError):
            skipped += 1
            continue
        skipped += not mapping.add(topic, msg, m.log_time_ns)
        last_ns = m.log_time_ns
    damage = str(contents.damage) if contents.damage else ""
    if damage:
        rec.set_time("ros_time", timestamp=last_ns * 1e-9)
        rec.log("events/bag", rr.TextLog(f"the bag is damaged: shown as far as it reads: {damage}", level="ERROR"))
    eye = mapping.eye()
    if eye is not None or mapping.poseless():   # the whole run is known now: all of the scene in view, or its graph
        rec.send_blueprint(blueprint(eye=eye, graph_first=mapping.poseless()))
    rec.flush()
    rec.disconnect()
    return ViewFile(out, mapping.shown, mapping.logged_to, skipped, damage)
