"""The prompt the one call path renders, pinned byte for byte: for one context, schema, memory and budget, what the
in-process model prefills and what a planner server is sent (chat and completions), with E-RECAP and with recency.

golden/rendered_prompt.txt was written by the code before the call path was one (commit 211b8d0^):
`python test_rendered_prompt.py <file>` writes it again from whatever erecap_planner is on the path.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path

from brace_common.action_schema import Step
from brace_common.vocabulary import Block, Failure, Mode
from brace_memory.system import StepOutcome
from erecap_planner.call_path import CallRequest
from erecap_planner.config import PlannerConfig
from erecap_planner.context import ContextBuffer, Entry
from erecap_planner.factory import build_call_path
from erecap_planner.openai_fault_server import FaultServer
from erecap_planner.pruned_forward import ErecapModel
from erecap_planner.testing import saved_tiny_llama

GOLDEN = Path(__file__).resolve().parent / "golden" / "rendered_prompt.txt"
SCHEMA_YAML = """\
max_steps: 3
actions:
  move_to: {target: {choices: [dock_1, dock_2, shelf_3]}}
  pick: {object: {type: string}}
  wait: {steps: {type: integer, required: false}}
"""
PATHS = [("local", "erecap", ""), ("local", "recency", ""), ("openai", "erecap", "chat"),
         ("openai", "erecap", "completions"), ("openai", "recency", "chat"), ("openai", "recency", "completions")]
"""(backend, compressor, endpoint) of each call pinned."""


def context() -> ContextBuffer:
    """Two agents' task, constraints, history, states and a message; longer than the budget."""
    c = ContextBuffer()
    c.add(Entry("a", 0, Block.TASK, "fetch cup_3 to dock_2", "task"))
    c.add(Entry("a", 0, Block.CONSTRAINTS, "never enter aisle 4", "constraint"))
    for t in range(24):
        c.add(Entry("a" if t % 2 else "b", t, Block.HISTORY, f"step {t}: shelf {t} checked, aisle clear", "observation"))
    c.add(Entry("b", 23, Block.STATE, "at (1, 3), holding box_7"))
    c.add(Entry("a", 23, Block.STATE, "at (4, 0), gripper empty"))
    c.add(Entry("b", 23, Block.COORDINATION, "b -> a: I hold the corridor until step 30", "message"))
    return c


REQUEST = CallRequest("a", token_budget=520, slo_ms=60_000.0, hard_deadline_ms=120_000.0, step=24)


def config(model: str, schema: str, url: str, backend: str, compressor: str, endpoint: str) -> PlannerConfig:
    """The planner configuration of one pinned call (memory: reflective, 40 % of B_t)."""
    cfg = PlannerConfig(backend=backend, server_url=url, endpoint=endpoint or "chat", compressor=compressor,
                        model_path=model, action_schema_file=schema, pruning_layers=[1, 3], device="cpu",
                        dtype="float32", max_new_tokens=4, memory_modules=["reflective"], memory_share=0.4)
    cfg.validate()
    return cfg


@contextmanager
def spied(owner: type, method: str, seen: list, keep):
    """`keep(args, result)` of every call of `owner.method` appended to `seen` while inside."""
    original = getattr(owner, method)

    def spy(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        seen.append(keep(args, result))
        return result

    setattr(owner, method, spy)
    try:
        yield
    finally:
        setattr(owner, method, original)


def pinned(folder: Path) -> tuple[str, dict[str, str]]:
    """(the golden text, each call path's rendered context) of the calls in PATHS; `folder` holds the tiny model."""
    model = saved_tiny_llama(folder / "tiny")
    schema = folder / "schema.yaml"
    schema.write_text(SCHEMA_YAML)
    sections: dict[str, str] = {}
    rendered: dict[str, str] = {}
    with FaultServer() as server:
        for backend, compressor, endpoint in PATHS:
            name = " ".join(w for w in (backend, compressor, endpoint) if w)
            path = build_call_path(config(model, str(schema), server.base_url, backend, compressor, endpoint))
            memory = path.memory.system
            memory.on_plan("a", 20, Mode.FULL_REPLAN, [Step("move_to", {"target": "shelf_3"})])
            memory.on_outcome(StepOutcome("a", 21, "move_to", False, "blocked by agent b", Failure.COLLISION.value))
            contexts: list[str] = []
            prefilled: list[list[int]] = []
            sent = len(server.requests)
            with spied(ContextBuffer, "render", contexts,
                       lambda args, ctx: args[0].decode(ctx.token_ids, skip_special_tokens=False)), \
                    spied(ErecapModel, "prefill", prefilled, lambda args, pre: [int(t) for t in args[0].tolist()]):
                path.run(context(), REQUEST)
            (rendered[name],) = contexts
            if backend == "local":
                (ids,) = prefilled
                sections[f"{name}: the prompt the model prefills"] = path.tokenizer.decode(ids, skip_special_tokens=False)
            else:
                (request,) = server.requests[sent:]
                sections[f"{name}: {request['path']}"] = json.dumps(request["body"], indent=1, sort_keys=True)
            memory.close()
    first = next(iter(rendered.values()))
    text = "".join(f"===== {title}\n{body}\n" for title, body in [("rendered context (every call path)", first),
                                                                  *sections.items()])
    return text, rendered


def test_every_backend_renders_the_prompt_the_pre_refactor_planner_rendered(tmp_path):
    text, rendered = pinned(tmp_path)
    first = next(iter(rendered.values()))
    assert all(r == first for r in rendered.values()), [n for n, r in rendered.items() if r != first]
    assert "MEMORY" in text and "blocked by agent b" in text  # memory's line spliced in, inside the budget
    local = text.split("===== local recency: the prompt the model prefills\n")[1].split("\n===== ")[0]
    completions = text.split("===== openai recency completions: /v1/completions\n")[1].split("\n===== ")[0]
    assert json.loads(completions)["prompt"] == local  # the same kept tokens for the model here and the server
    assert text == GOLDEN.read_text()


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        Path(sys.argv[1]).write_text(pinned(Path(tmp))[0])
