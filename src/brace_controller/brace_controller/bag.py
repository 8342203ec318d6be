"""rosbag2 directories in MCAP storage: write serialized messages, read them back, survive truncation.

A bag is a directory with `metadata.yaml` (rosbag2 format, version 9) and one
`.mcap` file whose schemas are the ROS 2 message definitions (`ros2msg`) and
whose messages are CDR, the layout `ros2 bag`, Foxglove and the `rosbags` /
`mcap` readers expect. Works on serialized bytes: no ROS import here except
for locating message definitions on the ament prefix path.

Reading walks the MCAP records itself: a chunk whose CRC or layout is wrong
is skipped and reading goes on with the next record, so one damaged chunk
costs only its own messages; a file cut short yields everything before the
cut. `BagDamage` says what was skipped and where reading stopped. While
recording, `write_metadata()` rewrites metadata.yaml (the recorder calls it
every few seconds), so a killed recorder leaves a bag that readers open.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml
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
    qos: list = field(default_factory=list)  # offered QoS profiles as rosbag2 writes them (qos_profile_dict)
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

    def add_topic(self, name: str, type_name: str, qos: Optional[list] = None) -> None:
        """Register a topic before its first message; `qos`: its offered profiles (`qos_profile_dict`)."""
        if name in self._channels:
            return
        if type_name not in self._schemas:
            self._schemas[type_name] = self._writer.register_schema(
                type_name, "ros2msg", message_definition(type_name).encode())
        qos = list(qos or [])
        self._channels[name] = self._writer.register_channel(
            name, "cdr", self._schemas[type_name],
            {"offered_qos_profiles": yaml.safe_dump(qos, sort_keys=False) if qos else ""})
        self.topics[name] = TopicInfo(name, type_name, qos)

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
        self.write_metadata()

    def write_metadata(self) -> None:
        """Write metadata.yaml for what was written so far (atomically: a reader never sees half a file)."""
        if not self.closed:
            self._stream.flush()  # the chunks written so far reach the file: a killed recorder keeps them
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
        partial = self.directory / "metadata.yaml.partial"
        partial.write_text(yaml.safe_dump(info, sort_keys=False))
        partial.replace(self.directory / "metadata.yaml")


INFINITE = {"sec": 9223372036, "nsec": 854775807}
"""rosbag2's spelling of an unset (infinite) QoS duration."""


def qos_profile_dict(history: str, depth: int, reliability: str, durability: str) -> dict:
    """One offered QoS profile as rosbag2 (metadata version 9) writes it: every key, durations infinite."""
    return {"history": history, "depth": depth, "reliability": reliability, "durability": durability,
            "deadline": dict(INFINITE), "lifespan": dict(INFINITE), "liveliness": "automatic",
            "liveliness_lease_duration": dict(INFINITE), "avoid_ros_namespace_conventions": False}


@dataclass
class BagMessage:
    """One message read back."""

    topic: str
    type: str
    log_time_ns: int
    data: bytes


@dataclass
class BagDamage:
    """What was wrong with a damaged bag: chunks skipped, where reading stopped, what was recovered."""

    file: str
    error: str
    recovered: int
    last_time_ns: int
    skipped_chunks: int = 0

    def __str__(self) -> str:
        skipped = f"{self.skipped_chunks} damaged chunks skipped; " if self.skipped_chunks else ""
        return (f"{self.file} is truncated or corrupt ({self.error}); {skipped}recovered {self.recovered} messages "
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


MAGIC = b"\x89MCAP0\r\n"
OP_SCHEMA, OP_CHANNEL, OP_MESSAGE, OP_CHUNK, OP_FOOTER = 0x03, 0x04, 0x05, 0x06, 0x02


class _Damaged(ValueError):
    """A record whose layout is wrong."""


class _Fields:
    """Little-endian reads over one record's body; _Damaged when the body is too short."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _Damaged("record shorter than its fields")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u(self, fmt: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.take(self.u("I")).decode("utf-8", errors="replace")

    def rest(self) -> bytes:
        return self.take(len(self.data) - self.pos)


def _records(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(opcode, body) of consecutive MCAP records in `data`; stops at a record cut short (_Damaged)."""
    pos = 0
    while pos < len(data):
        if pos + 9 > len(data):
            raise _Damaged("file ends inside a record header")
        opcode, length = data[pos], struct.unpack_from("<Q", data, pos + 1)[0]
        if pos + 9 + length > len(data):
            raise _Damaged(f"file ends inside a record (opcode 0x{opcode:02x}, {length} bytes)")
        yield opcode, data[pos + 9:pos + 9 + length]
        pos += 9 + length


def _chunk_records(body: bytes) -> bytes:
    """The records inside a Chunk body, CRC-checked; _Damaged when its layout or CRC is wrong."""
    f = _Fields(body)
    f.u("Q"), f.u("Q")  # message start / end time
    size, crc = f.u("Q"), f.u("I")
    compression = f.string()
    records = f.take(f.u("Q"))
    if compression:
        raise _Damaged(f"compressed chunk ({compression}) is not read here")
    if len(records) != size or (crc and zlib.crc32(records) != crc):
        raise _Damaged("chunk CRC mismatch")
    return records


def _stream(path: Path, skipped: list[str]) -> Iterator[tuple[str, str, int, bytes]]:
    """(topic, type, log time, data) of every readable message; damaged chunks are skipped into `skipped`."""
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        raise _Damaged("not an MCAP file (bad magic)")
    schemas: dict[int, str] = {}
    channels: dict[int, tuple[str, int]] = {}

    def handle(opcode: int, body: bytes) -> Iterator[tuple[str, str, int, bytes]]:
        f = _Fields(body)
        if opcode == OP_SCHEMA:
            schema_id = f.u("H")
            schemas[schema_id] = f.string()
        elif opcode == OP_CHANNEL:
            channel_id, schema_id = f.u("H"), f.u("H")
            channels[channel_id] = (f.string(), schema_id)
        elif opcode == OP_MESSAGE:
            channel_id, _sequence, log_time, _publish = f.u("H"), f.u("I"), f.u("Q"), f.u("Q")
            if channel_id not in channels:
                raise _Damaged(f"message on unknown channel {channel_id}")
            topic, schema_id = channels[channel_id]
            yield topic, schemas.get(schema_id, ""), log_time, f.rest()

    for opcode, body in _records(data[len(MAGIC):]):
        if opcode == OP_FOOTER:
            return
        if opcode != OP_CHUNK:
            yield from handle(opcode, body)
            continue
        try:
            inner = list(_records(_chunk_records(body)))
            messages = [m for op, b in inner for m in handle(op, b)]
        except (_Damaged, struct.error, UnicodeDecodeError) as exc:
            skipped.append(str(exc))  # one bad chunk: its messages are lost, the next record is read
            continue
        yield from messages


def read_bag(bag: str | Path) -> BagContents:
    """All readable messages of a bag; damage is reported in `damage`, never raised (BagError: nothing to read)."""
    out = BagContents()
    meta = Path(bag) / "metadata.yaml"
    if meta.is_file():
        try:
            out.metadata = yaml.safe_load(meta.read_text()) or {}
        except yaml.YAMLError:
            out.metadata = {}
    for path in mcap_files(bag):
        skipped: list[str] = []
        error = ""
        try:
            for topic, type_name, log_time, data in _stream(path, skipped):
                out.messages.append(BagMessage(topic, type_name, log_time, data))
        except (_Damaged, struct.error, OSError) as exc:
            error = str(exc) or type(exc).__name__
        if skipped or error:
            last = max((m.log_time_ns for m in out.messages), default=0)
            out.damage = BagDamage(path.name, error or skipped[0], len(out.messages), last, len(skipped))
    out.messages.sort(key=lambda m: m.log_time_ns)
    return out
