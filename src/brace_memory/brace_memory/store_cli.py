"""brace-memory: list, show and clear the records of a memory store file.

Exit status: 0 done, 1 a clear the user declined at the prompt, 2 bad arguments or no store file at --store.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any, Optional

from brace_memory.records import MemoryRecord, RecordKind, check_agent
from brace_memory.store import MemoryStore, StoreError

PROG = "brace-memory"
EXIT_OK = 0
EXIT_DECLINED = 1
EXIT_USAGE = 2


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def record_line(record: MemoryRecord, with_agent: bool = True) -> str:
    """One record as a tab-separated line: agent, kind, key, steps, count, importance, fields as compact JSON."""
    cells = [record.agent_id, record.kind.value] if with_agent else []
    cells += [record.key, f"steps={record.first_step}..{record.last_step}", f"count={record.count}",
              f"importance={record.importance:.2f}", _compact(record.fields)]
    return "\t".join(cells)


def record_json(record: MemoryRecord) -> dict[str, Any]:
    """One record as a JSON object (the MemoryRecord's attributes, kind as its value)."""
    out = dataclasses.asdict(record)
    out["kind"] = record.kind.value
    return out


def _corrupt_note(store: MemoryStore) -> str:
    return f"{store.counts['corrupt']} corrupt skipped"


def cmd_list(store: MemoryStore, args: argparse.Namespace) -> int:
    """Print the records that match --agent / --kind, oldest update first, then a count line."""
    records = store.records(args.agent, args.kind)
    if args.json:
        print(json.dumps({"store": str(store.path), "records": [record_json(r) for r in records],
                          "count": len(records), "corrupt": store.counts["corrupt"]}, ensure_ascii=False))
        return EXIT_OK
    for record in records:
        print(record_line(record))
    print(f"{len(records)} records, {_corrupt_note(store)}")
    return EXIT_OK


def cmd_show(store: MemoryStore, args: argparse.Namespace) -> int:
    """Print one agent's records grouped by kind."""
    records = store.records(args.agent)
    print(f"{args.agent}: {len(records)} records, {_corrupt_note(store)}")
    for kind in RecordKind:
        group = [r for r in records if r.kind is kind]
        if group:
            print(f"{kind.value} ({len(group)})")
            for record in group:
                print("  " + record_line(record, with_agent=False))
    return EXIT_OK


def _describe(args: argparse.Namespace) -> str:
    what = f"{args.kind} records" if args.kind else "records"
    return f"{what} of {args.agent}" if args.agent else f"{what} of every agent"


def cmd_clear(store: MemoryStore, args: argparse.Namespace) -> int:
    """Delete the records that match --agent / --kind, after --yes or a confirmation on a terminal."""
    if not args.yes:
        if not sys.stdin.isatty():
            print(f"{PROG}: clear deletes records; pass --yes (stdin is not a terminal to ask on)", file=sys.stderr)
            return EXIT_USAGE
        pending = store.count(args.agent, args.kind)
        answer = input(f"delete {pending} {_describe(args)} from {store.path}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return EXIT_DECLINED
    deleted = store.clear(args.agent, args.kind)
    print(f"deleted {deleted} {_describe(args)} from {store.path}")
    return EXIT_OK


def _agent(value: str) -> str:
    try:
        return check_agent(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    """The `brace-memory` argument parser."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    kinds = [k.value for k in RecordKind]

    def with_store(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--store", required=True, help="the store file (never created here)")
        return p

    lst = with_store("list", "print records, oldest update first")
    lst.add_argument("--agent", type=_agent, help="only this agent's records")
    lst.add_argument("--kind", choices=kinds, help="only records of this kind")
    lst.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    lst.set_defaults(func=cmd_list)
    show = with_store("show", "print one agent's records grouped by kind")
    show.add_argument("--agent", type=_agent, required=True)
    show.set_defaults(func=cmd_show)
    clear = with_store("clear", "delete records (all of them unless --agent / --kind)")
    clear.add_argument("--agent", type=_agent, help="only this agent's records")
    clear.add_argument("--kind", choices=kinds, help="only records of this kind")
    clear.add_argument("--yes", action="store_true", help="do not ask (required when stdin is not a terminal)")
    clear.set_defaults(func=cmd_clear)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run `brace-memory list|show|clear`; the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2): return it like every other outcome
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        store = MemoryStore(args.store, create=False)
    except StoreError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    with store:
        return args.func(store, args)


if __name__ == "__main__":
    sys.exit(main())
