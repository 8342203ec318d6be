"""rosbag2 directories in MCAP storage: write serialized messages, read them back, survive truncation.

A bag is a directory with `metadata.yaml` (rosbag2 format, version 9) and one
`.mcap` file whose schemas are the ROS 2 message definitions (`ros2msg`) and
whose messages are CDR, the layout `ros2 bag`, Foxglove and the `rosbags` /
`mcap` readers expect. Works on serialized bytes: no ROS import here except
for locating message definitions on the ament prefix path.

Reading streams the MCAP records: a truncated or corrupt file yields every
message before the damage and a `BagDamage` saying where reading stopped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml
from mcap.exceptions import McapError
from mcap.records import Channel, Message, Schema
from mcap.stream_reader import StreamReader
from mcap.writer import CompressionType, Writer

PRIMITIVES = {"bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
              "int64", "uint64", "string", "wstring"}
SEPARATOR = "=" * 80


class BagError(RuntimeError):
    """A bag that cannot be read at all."""


def _share_dirs() -> list[Path]:
    dirs = []
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            dirs.append(Path(prefix) / "share")
    return dirs


def _definition_file(type_name: str) -> Path:
    pkg, kind, name = type_name.split("/")
    for share in _share_dirs():
        candidate = share / pkg / kind / f"{name}.{kind}"
        if candidate.is_file():
            return candidate
    raise BagError(f"no definition of {type_name} on AMENT_PREFIX_PATH")


def _dependencies(text: str, pkg: str) -> list[str]:
    deps = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or "=" in line.split()[0] or len(line.split()) < 2:
            continue
        base = re.sub(r"(<=\d+)?(\[.*\])?$", "", line.split()[0])  # string<=N, T[], T[N], T[<=N]
        if base in PRIMITIVES:
            continue
        if base == "Header":
            deps.append("std_msgs/msg/Header")
        elif "/" in base:
            parts = base.split("/")
            deps.append(f"{parts[0]}/msg/{parts[-1]}")
        else:
            deps.append(f"{pkg}/msg/{base}")
    return deps


def message_definition(type_name: str) -> str:
    """The ros2msg schema text of `type_name` ('pkg/msg/Name'): its .msg file then every dependency once."""
    main = _definition_file(type_name).read_text()
    parts, seen = [main], {type_name}
    queue = _dependencies(main, type_name.split("/")[0])
    while queue:
        dep = queue.pop(0)
        if dep in seen:
            continue
        seen.add(dep)
        text = _definition_file(dep).read_text()
        pkg, _, name = dep.split("/")
        parts.append(f"{SEPARATOR}\nMSG: {pkg}/{name}\n{text}")
        queue.extend(_dependencies(text, pkg))
    return "\n".join(parts)


@dataclass
class TopicInfo:
    """One recorded topic."""

    name: str
    type: str
    qos: str = ""
    count: int = 0


class BagWriter:
    """Writes one rosbag2 MCAP directory; `close()` finishes the file and writes metadata.yaml."""

    def __init__(self, directory: str | Path, chunk_size: int = 64 * 1024):
        self.directory = Path(directory)
        if self.directory.exists() and any(self.directory.iterdir()):
            raise BagError(f"{self.directory} exists and is not empty")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.file_name = f"{self.directory.name}_0.mcap"
        self._stream = open(self.directory / self.file_name, "wb")  # noqa: SIM115 (closed in close())
        self._writer = Writer(self._stream, chunk_size=chunk_size, compression=CompressionType.NONE)
        self._writer.start(profile="ros2", library="brace_ros audit_recorder")
        self.topics: dict[str, TopicInfo] = {}
        self._channels: dict[str, int] = {}
        self._schemas: dict[str, int] = {}
        self.first_ns: Optional[int] = None
        self.last_ns = 0
        self.closed = False

    def add_topic(self, name: str, type_name: str, qos_yaml: str = "") -> None:
        """Register a topic before its first message."""
        if name in self._channels:
            return
        if type_name not in self._schemas:
            self._schemas[type_name] = self._writer.register_schema(
                type_name, "ros2msg", message_definition(type_name).encode())
        self._channels[name] = self._writer.register_channel(
            name, "cdr", self._schemas[type_name], {"offered_qos_profiles": qos_yaml})
        self.topics[name] = TopicInfo(name, type_name, qos_yaml)

    def write(self, topic: str, data: bytes, log_time_ns: int) -> None:
        """Append one serialized message."""
        info = self.topics[topic]
        self._writer.add_message(self._channels[topic], log_time=log_time_ns, data=data,
                                 publish_time=log_time_ns, sequence=info.count)
        info.count += 1
        self.first_ns = log_time_ns if self.first_ns is None else min(self.first_ns, log_time_ns)
        self.last_ns = max(self.last_ns, log_time_ns)

    def close(self) -> None:
        """Finish the MCAP file and write metadata.yaml (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self._writer.finish()
        self._stream.close()
        start = self.first_ns or 0
        duration = max(0, self.last_ns - start)
        total = sum(t.count for t in self.topics.values())
        info = {"rosbag2_bagfile_information": {
            "version": 9, "storage_identifier": "mcap", "duration": {"nanoseconds": duration},
            "starting_time": {"nanoseconds_since_epoch": start}, "message_count": total,
            "topics_with_message_count": [
                {"topic_metadata": {"name": t.name, "type": t.type, "serialization_format": "cdr",
                                    "offered_qos_profiles": t.qos, "type_description_hash": ""},
                 "message_count": t.count} for t in self.topics.values()],
            "compression_format": "", "compression_mode": "",
            "relative_file_paths": [self.file_name],
            "files": [{"path": self.file_name, "starting_time": {"nanoseconds_since_epoch": start},
                       "duration": {"nanoseconds": duration}, "message_count": total}],
            "custom_data": {}, "ros_distro": os.environ.get("ROS_DISTRO", "kilted"),
        }}
        (self.directory / "metadata.yaml").write_text(yaml.safe_dump(info, sort_keys=False))


@dataclass
class BagMessage:
    """One message read back."""

    topic: str
    type: str
    log_time_ns: int
    data: bytes


@dataclass
class BagDamage:
    """Where reading a damaged bag stopped, and what was recovered before it."""

    file: str
    error: str
    recovered: int
    last_time_ns: int

    def __str__(self) -> str:
        return (f"{self.file} is truncated or corrupt ({self.error}); recovered {self.recovered} messages "
                f"up to t={self.last_time_ns / 1e9:.3f} s")


@dataclass
class BagContents:
    """Every readable message of a bag, in log-time order, and any damage found."""

    messages: list[BagMessage] = field(default_factory=list)
    damage: Optional[BagDamage] = None
    metadata: dict = field(default_factory=dict)

    def of(self, topic: str) -> list[BagMessage]:
        """Messages of one topic."""
        return [m for m in self.messages if m.topic == topic]


def mcap_files(bag: str | Path) -> list[Path]:
    """The MCAP files of a bag directory (from metadata.yaml, else by glob), or the file itself."""
    bag = Path(bag)
    if bag.is_file():
        return [bag]
    if not bag.is_dir():
        raise BagError(f"{bag} is not a bag directory or an .mcap file")
    meta = bag / "metadata.yaml"
    if meta.is_file():
        try:
            info = yaml.safe_load(meta.read_text())["rosbag2_bagfile_information"]
            files = [bag / p for p in info.get("relative_file_paths", [])]
            if files and all(f.is_file() for f in files):
                return files
        except (yaml.YAMLError, KeyError, TypeError):
            pass
    files = sorted(bag.glob("*.mcap"))
    if not files:
        raise BagError(f"{bag} holds no .mcap file")
    return files


def _stream(path: Path) -> Iterator[tuple[Schema, Channel, Message]]:
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    with open(path, "rb") as f:
        for record in StreamReader(f, skip_magic=False, validate_crcs=True).records:
            if isinstance(record, Schema):
                schemas[record.id] = record
            elif isinstance(record, Channel):
                channels[record.id] = record
            elif isinstance(record, Message):
                channel = channels[record.channel_id]
                yield schemas.get(channel.schema_id), channel, record


def read_bag(bag: str | Path) -> BagContents:
    """All messages of a bag; reading stops at the first damage, which is reported, not raised."""
    out = BagContents()
    meta = Path(bag) / "metadata.yaml"
    if meta.is_file():
        try:
            out.metadata = yaml.safe_load(meta.read_text()) or {}
        except yaml.YAMLError:
            out.metadata = {}
    for path in mcap_files(bag):
        try:
            for schema, channel, message in _stream(path):
                out.messages.append(BagMessage(channel.topic, schema.name if schema else "", message.log_time,
                                               message.data))
        except (McapError, EOFError, KeyError, ValueError, OSError) as exc:
            last = max((m.log_time_ns for m in out.messages), default=0)
            out.damage = BagDamage(path.name, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
                                   len(out.messages), last)
            break
    out.messages.sort(key=lambda m: m.log_time_ns)
    return out
