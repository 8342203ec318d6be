"""rosbag2 directories in MCAP storage: write serialized messages, read them back, survive truncation.

A bag is a directory with `metadata.yaml` (rosbag2 format, version 9) and one
`.mcap` file whose schemas are the ROS 2 message definitions (`ros2msg`) and
whose messages are CDR, the layout `ros2 bag`, Foxglove and the `rosbags` /
`mcap` readers expect. Works on serialized bytes: no ROS import here except
for locating message definitions on the ament prefix path.

Reading walks the MCAP records itself: a chunk whose CRC or layout is wrong
is skipped and reading goes on with the next record, so one damaged chunk
costs only its own messages; a file cut short yields everything before the
cut. A file without its footer, summary and end magic (a recorder that was
killed) is damaged even when every record read is intact. `BagDamage` says
what was skipped, where reading stopped and what was lost. While recording,
`write_metadata()` finishes the chunk in progress, hands it to the OS and
rewrites metadata.yaml (the recorder calls it every `metadata_period_s`), so a
killed recorder loses at most what it received since the last call.
`recover_bag()` rewrites such a bag into a finished MCAP file with a
consistent metadata.yaml that third-party readers open.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml
from mcap.writer import CompressionType, Writer

from brace_common.counters import Health

PRIMITIVES = {"bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
              "int64", "uint64", "string", "wstring"}
SEPARATOR = "=" * 80

METADATA_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""What writes metadata.yaml: libyaml's emitter where PyYAML has it (the same text as SafeDumper, a quarter of the
CPU: the recorder rewrites the file every `metadata_period_s` while messages arrive)."""


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
    """Writes one rosbag2 MCAP directory; `close()` finishes the file and writes metadata.yaml.

    Thread-safe: a recorder's callbacks run on executor threads while its owner may close it from another (brace-run
    closes the bag while a metadata timer's callback may still be running); a message after `close()` is dropped.
    """

    def __init__(self, directory: str | Path, chunk_size: int = 64 * 1024, file_name: str = "",
                 library: str = "brace_ros audit_recorder"):
        self.directory = Path(directory)
        if self.directory.exists() and any(self.directory.iterdir()):
            raise BagError(f"{self.directory} exists and is not empty")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.file_name = file_name or f"{self.directory.name}_0.mcap"
        self._stream = open(self.directory / self.file_name, "wb")  # noqa: SIM115 (closed in close())
        self._writer = Writer(self._stream, chunk_size=chunk_size, compression=CompressionType.NONE)
        self._writer.start(profile="ros2", library=library)
        self.topics: dict[str, TopicInfo] = {}
        self.custom_data: dict[str, str] = {}  # metadata.yaml's custom_data
        self._channels: dict[str, int] = {}
        self._schemas: dict[str, int] = {}
        self.first_ns: Optional[int] = None
        self.last_ns = 0
        self.closed = False
        self._lock = threading.RLock()

    @property
    def total(self) -> int:
        """Messages written so far, every topic."""
        return sum(t.count for t in self.topics.values())

    def health(self) -> Health:
        """Messages written per topic (the bag's names), as diagnostics values."""
        return Health({name: info.count for name, info in self.topics.items()})

    def add_topic(self, name: str, type_name: str, qos: Optional[list] = None,
                  definition: Optional[bytes] = None) -> None:
        """Register a topic before its first message; `qos`: its offered profiles (`qos_profile_dict`);
        `definition`: its ros2msg schema (default: the .msg files on the ament prefix path)."""
        with self._lock:
            self._add_topic(name, type_name, qos, definition)

    def _add_topic(self, name: str, type_name: str, qos: Optional[list], definition: Optional[bytes]) -> None:
        if name in self._channels:
            return
        if type_name not in self._schemas:
            self._schemas[type_name] = self._writer.register_schema(
                type_name, "ros2msg", message_definition(type_name).encode() if definition is None else definition)
        qos = list(qos or [])
        self._channels[name] = self._writer.register_channel(
            name, "cdr", self._schemas[type_name],
            {"offered_qos_profiles": yaml.safe_dump(qos, sort_keys=False) if qos else ""})
        self.topics[name] = TopicInfo(name, type_name, qos)

    def write(self, topic: str, data: bytes, log_time_ns: int, publish_time_ns: Optional[int] = None) -> bool:
        """Append one serialized message (`publish_time_ns` defaults to its log time); False (dropped) once closed."""
        with self._lock:
            if self.closed:
                return False
            info = self.topics[topic]
            self._writer.add_message(self._channels[topic], log_time=log_time_ns, data=data,
                                     publish_time=log_time_ns if publish_time_ns is None else publish_time_ns,
                                     sequence=info.count)
            info.count += 1
            self.first_ns = log_time_ns if self.first_ns is None else min(self.first_ns, log_time_ns)
            self.last_ns = max(self.last_ns, log_time_ns)
            return True

    def close(self) -> None:
        """Finish the MCAP file and write metadata.yaml (idempotent)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._writer.finish()
            self._stream.close()
            self.write_metadata()

    def add_note(self, name: str, data: dict[str, str]) -> None:
        """An MCAP metadata record `name` in the file (read back as `BagContents.notes`)."""
        with self._lock:
            self._writer.add_metadata(name, data)

    def flush(self) -> None:
        """Finish the chunk in progress and hand every byte written so far to the OS: a killed process keeps them."""
        with self._lock:
            if not self.closed:
                self._writer.flush()

    def write_metadata(self) -> None:
        """Flush, then write metadata.yaml for what the file holds (atomically: a reader never sees half a file)."""
        with self._lock:
            self._write_metadata()

    def _write_metadata(self) -> None:
        self.flush()
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
            "custom_data": dict(self.custom_data), "ros_distro": os.environ.get("ROS_DISTRO", "kilted"),
        }}
        partial = self.directory / "metadata.yaml.partial"
        partial.write_text(yaml.dump(info, Dumper=METADATA_DUMPER, sort_keys=False))
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
    """What was wrong with a damaged bag: chunks skipped, where reading stopped, what was recovered and lost."""

    file: str
    error: str
    recovered: int
    last_time_ns: int
    skipped_chunks: int = 0
    lost_bytes: int = 0                # bytes after the last intact record, not read
    finished: bool = True              # the file has its footer, summary and end magic
    expected: Optional[int] = None     # messages metadata.yaml counts (None: no metadata.yaml)
    cut_record: str = ""               # the record the file ends inside ('chunk', 'message index', ...)

    @property
    def missing(self) -> int:
        """Messages metadata.yaml counts that could not be read (0 when unknown)."""
        return max(0, (self.expected or 0) - self.recovered)

    @property
    def lost_data(self) -> bool:
        """Whether messages were lost, as far as the file and metadata.yaml tell (not only its index or footer)."""
        return bool(self.skipped_chunks or self.missing or self.cut_record in ("chunk", "message"))

    def __str__(self) -> str:
        parts = [f"{self.file} is damaged ({self.error})"]
        if not self.finished:
            parts.append("no MCAP footer / summary / end magic: the recorder did not finish the file (killed?)")
        if self.lost_bytes:
            cut = f" (cut inside a {self.cut_record} record)" if self.cut_record else ""
            parts.append(f"{self.lost_bytes} bytes after the last intact record discarded{cut}")
        if self.skipped_chunks:
            parts.append(f"{self.skipped_chunks} damaged chunks skipped")
        parts.append(f"recovered {self.recovered} messages up to t={self.last_time_ns / 1e9:.3f} s")
        if self.expected is not None:
            parts.append(f"metadata.yaml counts {self.expected}: {self.missing} of them missing" if self.missing
                         else f"metadata.yaml counts {self.expected}, none of them missing")
        return "; ".join(parts)


@dataclass
class BagContents:
    """Every readable message of a bag, in log-time order, any damage found and the file's metadata records."""

    messages: list[BagMessage] = field(default_factory=list)
    damage: Optional[BagDamage] = None
    metadata: dict = field(default_factory=dict)
    notes: dict[str, dict[str, str]] = field(default_factory=dict)  # MCAP metadata records by name
    definitions: dict[str, str] = field(default_factory=dict)        # type -> the ros2msg schema the bag recorded

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
OP_FOOTER, OP_SCHEMA, OP_CHANNEL, OP_MESSAGE, OP_CHUNK, OP_METADATA = 0x02, 0x03, 0x04, 0x05, 0x06, 0x0C
RECORD_NAMES = {0x01: "header", OP_FOOTER: "footer", OP_SCHEMA: "schema", OP_CHANNEL: "channel",
                OP_MESSAGE: "message", OP_CHUNK: "chunk", 0x07: "message index", 0x08: "chunk index",
                0x09: "attachment", 0x0A: "attachment index", 0x0B: "statistics", OP_METADATA: "metadata",
                0x0D: "metadata index", 0x0E: "summary offset", 0x0F: "data end"}
RECOVERY_NOTE = "brace_recovery"
"""Name of the MCAP metadata record (and the metadata.yaml custom_data prefix) `recover_bag` writes."""


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

    def string_map(self) -> dict[str, str]:
        inner = _Fields(self.take(self.u("I")))
        out = {}
        while inner.pos < len(inner.data):
            key = inner.string()
            out[key] = inner.string()
        return out

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


@dataclass
class _Message:
    channel: int
    sequence: int
    log_time_ns: int
    publish_time_ns: int
    data: bytes


@dataclass
class _Scan:
    """What one pass over an MCAP file found: its definitions, messages, notes, and where and how it is damaged."""

    size: int
    schemas: dict[int, tuple[str, str, bytes]] = field(default_factory=dict)   # id -> (name, encoding, data)
    channels: dict[int, tuple[str, int, str, dict]] = field(default_factory=dict)  # id -> (topic, schema, enc, meta)
    messages: list[_Message] = field(default_factory=list)
    notes: dict[str, dict[str, str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)   # why each skipped chunk or record was skipped
    error: str = ""                                    # why reading stopped before the end magic ('' = it did not)
    intact_end: int = 0                                # offset just past the last intact record
    cut_record: str = ""
    finished: bool = False

    def topic_type(self, channel: int) -> tuple[str, str]:
        topic, schema, _enc, _meta = self.channels[channel]
        return topic, self.schemas.get(schema, ("", "", b""))[0]


def _handle(scan: _Scan, opcode: int, body: bytes, out: list[_Message]) -> None:
    """One schema, channel, message or metadata record into `scan` (messages into `out`); others are ignored."""
    f = _Fields(body)
    if opcode == OP_SCHEMA:
        schema_id = f.u("H")
        name, encoding = f.string(), f.string()
        scan.schemas[schema_id] = (name, encoding, f.take(f.u("I")))
    elif opcode == OP_CHANNEL:
        channel_id, schema_id = f.u("H"), f.u("H")
        topic, encoding = f.string(), f.string()
        scan.channels[channel_id] = (topic, schema_id, encoding, f.string_map())
    elif opcode == OP_MESSAGE:
        channel_id, sequence, log_time, publish = f.u("H"), f.u("I"), f.u("Q"), f.u("Q")
        if channel_id not in scan.channels:
            raise _Damaged(f"message on unknown channel {channel_id}")
        out.append(_Message(channel_id, sequence, log_time, publish, f.rest()))
    elif opcode == OP_METADATA:
        name = f.string()
        scan.notes[name] = f.string_map()


def _check_end(scan: _Scan, data: bytes, footer_at: int, body: bytes) -> None:
    """After the footer: the summary CRC and the end magic (scan.error when either is wrong)."""
    end = footer_at + 9 + len(body)
    if data[end:] != MAGIC:
        scan.error = "no end magic after the footer" if len(data) - end < len(MAGIC) else "bad end magic"
        return
    f = _Fields(body)
    summary_start, _offsets, crc = f.u("Q"), f.u("Q"), f.u("I")
    if crc and zlib.crc32(data[summary_start or footer_at:footer_at + 9 + 16]) != crc:
        scan.error = "summary CRC mismatch"
        return
    scan.intact_end, scan.finished = len(data), True


def _scan(path: Path) -> _Scan:
    """Every record of one MCAP file, tolerating damage; _Damaged only when it is not an MCAP file at all."""
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        raise _Damaged("not an MCAP file (bad magic)")
    scan = _Scan(size=len(data), intact_end=len(MAGIC))
    pos = len(MAGIC)
    while True:
        if pos == len(data):
            scan.error = "file ends without a footer"
            return scan
        if pos + 9 > len(data):
            scan.error, scan.cut_record = "file ends inside a record header", "unknown"
            return scan
        opcode, length = data[pos], struct.unpack_from("<Q", data, pos + 1)[0]
        if pos + 9 + length > len(data):
            scan.cut_record = RECORD_NAMES.get(opcode, f"0x{opcode:02x}")
            scan.error = f"file ends inside a {scan.cut_record} record of {length} bytes"
            return scan
        body = data[pos + 9:pos + 9 + length]
        if opcode == OP_FOOTER and len(data) - (pos + 9 + length) <= len(MAGIC):
            try:
                _check_end(scan, data, pos, body)
            except (_Damaged, struct.error):
                scan.error = "footer unreadable"
            return scan
        if opcode == OP_FOOTER:
            scan.skipped.append("a footer record amid the data")  # a damaged record: reading goes on
            pos += 9 + length
            scan.intact_end = pos
            continue
        messages: list[_Message] = []
        try:
            if opcode == OP_CHUNK:
                for inner_op, inner in _records(_chunk_records(body)):
                    _handle(scan, inner_op, inner, messages)
            else:
                _handle(scan, opcode, body, messages)
        except (_Damaged, struct.error, UnicodeDecodeError) as exc:
            scan.skipped.append(str(exc))  # one bad chunk or record: its messages are lost, the next one is read
        else:
            scan.messages.extend(messages)
        pos += 9 + length
        scan.intact_end = pos


def _metadata_count(metadata: dict) -> Optional[int]:
    try:
        return int(metadata["rosbag2_bagfile_information"]["message_count"])
    except (KeyError, TypeError, ValueError):
        return None


def _load_metadata(bag: Path) -> dict:
    meta = bag / "metadata.yaml"
    if not meta.is_file():
        return {}
    try:
        out = yaml.safe_load(meta.read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        return {}
    return out if isinstance(out, dict) else {}


def _scans(bag: Path) -> tuple[list[tuple[Path, Optional[_Scan], str]], dict]:
    """(file, scan or None, error) of every MCAP file of a bag, and its metadata.yaml (BagError: no file)."""
    out = []
    for path in mcap_files(bag):
        try:
            out.append((path, _scan(path), ""))
        except (_Damaged, OSError) as exc:
            out.append((path, None, str(exc) or type(exc).__name__))
    return out, _load_metadata(Path(bag))


def read_bag(bag: str | Path) -> BagContents:
    """All readable messages of a bag; damage is reported in `damage`, never raised (BagError: nothing to read)."""
    scans, metadata = _scans(Path(bag))
    out = BagContents(metadata=metadata)
    damaged: list[tuple[Path, Optional[_Scan], str]] = []
    for path, scan, error in scans:
        if scan is None:
            damaged.append((path, scan, error))
            continue
        out.notes.update(scan.notes)
        out.definitions.update({name: data.decode("utf-8", "replace") for name, encoding, data in scan.schemas.values()
                                if name and encoding == "ros2msg"})
        out.messages += [BagMessage(*scan.topic_type(m.channel), m.log_time_ns, m.data) for m in scan.messages]
        if scan.skipped or not scan.finished:
            damaged.append((path, scan, scan.error or scan.skipped[0]))
    expected = _metadata_count(metadata)
    if expected is not None and expected > len(out.messages) and not damaged:
        damaged.append((scans[0][0], scans[0][1], "metadata.yaml counts more messages than the file holds"))
    if damaged:
        path, scan, error = damaged[0]
        last = max((m.log_time_ns for m in out.messages), default=0)
        out.damage = BagDamage(path.name, error, len(out.messages), last,
                               skipped_chunks=sum(len(s.skipped) for _p, s, _e in scans if s),
                               lost_bytes=sum(s.size - s.intact_end for _p, s, _e in scans if s),
                               finished=all(s is not None and s.finished for _p, s, _e in scans),
                               expected=expected, cut_record=scan.cut_record if scan else "")
    out.messages.sort(key=lambda m: m.log_time_ns)
    return out


@dataclass
class Recovery:
    """What `recover_bag` wrote: the new bag, the messages it holds, and the damage of the source."""

    source: Path
    output: Path
    messages: int
    damage: Optional[BagDamage]
    dropped: int = 0            # messages read whose schema record was lost (not written)
    kept_original: Optional[Path] = None  # in place: where the damaged file was kept


def _offered_qos(channel_meta: dict, metadata: dict, topic: str) -> list:
    """A topic's offered QoS profiles: metadata.yaml's, else the channel's `offered_qos_profiles`."""
    try:
        for entry in metadata["rosbag2_bagfile_information"]["topics_with_message_count"]:
            if entry["topic_metadata"]["name"] == topic:
                return list(entry["topic_metadata"].get("offered_qos_profiles") or [])
    except (KeyError, TypeError):
        pass
    try:
        profiles = yaml.safe_load(channel_meta.get("offered_qos_profiles", "") or "[]")
    except yaml.YAMLError:
        return []
    return profiles if isinstance(profiles, list) else []


def recover_bag(bag: str | Path, output: str | Path | None = None, in_place: bool = False) -> Recovery:
    """Rewrite a damaged bag (a killed recorder's) into a finished MCAP file and a consistent metadata.yaml.

    Writes `output` (default `<bag>_recovered` beside it; it must not exist), or with `in_place` replaces the
    bag's file and metadata.yaml, keeping the damaged file as `<file>.damaged`. Every readable message is kept
    with its times; nothing is invented. Written in a temporary folder and renamed, so a reader never sees half a
    bag. BagError when nothing can be read or the output exists.
    """
    bag = Path(bag)
    scans, metadata = _scans(bag)
    contents = read_bag(bag)
    readable = [(p, s) for p, s, _e in scans if s is not None and s.messages]
    if not readable:
        raise BagError(f"{bag}: no message could be read")
    folder = bag if bag.is_dir() else bag.parent
    if in_place:
        if len(scans) != 1 or not bag.is_dir():
            raise BagError("--in-place needs a bag directory with one .mcap file")
        target, file_name = folder, scans[0][0].name
        kept = scans[0][0].with_name(scans[0][0].name + ".damaged")
        if kept.exists():
            raise BagError(f"{kept} exists: move it away first")
    else:
        target = Path(output) if output else bag.parent / f"{bag.name if bag.is_dir() else bag.stem}_recovered"
        if target.exists():
            raise BagError(f"{target} exists")
        file_name, kept = f"{target.name}_0.mcap", None
    temp = target.parent / f".{target.name}.recover-{os.getpid()}"
    try:
        writer = BagWriter(temp, file_name=file_name, library="brace_ros brace-audit recover")
        dropped = 0
        for _path, scan in readable:
            for topic, schema_id, _encoding, meta in scan.channels.values():
                name, _schema_encoding, definition = scan.schemas.get(schema_id, ("", "", b""))
                if name:
                    writer.add_topic(topic, name, _offered_qos(meta, metadata, topic), definition)
            for m in scan.messages:
                topic, _type = scan.topic_type(m.channel)
                if topic not in writer.topics:
                    dropped += 1  # its schema was lost with a damaged record
                    continue
                writer.write(topic, m.data, m.log_time_ns, m.publish_time_ns)
        damage = contents.damage
        note = {"source": str(bag.resolve()), "messages": str(len(contents.messages) - dropped),
                "damage": str(damage) if damage else "none",
                "lost_bytes": str(damage.lost_bytes if damage else 0),
                "skipped_chunks": str(damage.skipped_chunks if damage else 0),
                "cut_record": damage.cut_record if damage else "",
                "expected": "" if damage is None or damage.expected is None else str(damage.expected),
                "lost_data": str(bool(damage and damage.lost_data) or dropped > 0).lower()}
        writer.add_note(RECOVERY_NOTE, note)
        writer.custom_data = {f"{RECOVERY_NOTE}.{k}": v for k, v in note.items()}
        writer.close()
        with open(temp / file_name, "rb") as f:
            os.fsync(f.fileno())
        if in_place:
            original = scans[0][0]
            try:
                os.link(original, kept)
            except OSError:
                shutil.copy2(original, kept)
            os.replace(temp / file_name, original)
            os.replace(temp / "metadata.yaml", folder / "metadata.yaml")
            temp.rmdir()
        else:
            os.rename(temp, target)
    finally:
        if temp.exists():
            shutil.rmtree(temp, ignore_errors=True)
    total = sum(len(s.messages) for _p, s in readable) - dropped
    return Recovery(bag, target, total, contents.damage, dropped, kept)
