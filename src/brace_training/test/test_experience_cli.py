"""GiG's experience bank from oracle runs of training seeds: the store a planner's experience module reads."""

from __future__ import annotations

from brace_memory.records import RecordKind
from brace_memory.store import MemoryStore
from brace_memory.system import MemorySystem, MemorySystemConfig
from brace_training.experience_cli import TRAIN_SEEDS, main


def test_successful_oracle_episodes_fill_a_bank_a_planner_reads_back(tmp_path, capsys):
    store = tmp_path / "bank.sqlite"
    assert main(["--world", "warehouse", "--out", str(store), "--seeds", "2", "--num-agents", "2"]) == 0
    assert "4 experiences kept from 2 warehouse training seeds" in capsys.readouterr().out
    with MemoryStore(store) as kept:
        records = [r for a in kept.agents() for r in kept.records(a, RecordKind.EXPERIENCE)]
    assert len(records) == 4 and all(r.fields["goal"].startswith("deliver") for r in records)
    assert all(len(r.fields["keys"]) == len(r.fields["actions"]) >= 2 for r in records)
    assert all(r.first_step == 0 for r in records) and TRAIN_SEEDS >= 100_000

    planner = MemorySystem(MemorySystemConfig(["experience"]), MemoryStore(store))  # a later process: its bank holds them
    assert len(planner.bank) == 4
    first = records[0]
    match = planner.bank.search(first.fields["keys"][0])
    assert match is not None and match.goal == first.fields["goal"]
    planner.close()
