#!/usr/bin/env python3
"""Memory on TextWorld cooking games no one here wrote: flat history, ReCAP's tree, OmniAct's memory, both, and GiG's
(the session graph's loop warnings, with its experience bank, with Bounded Lookahead); each with and without E-RECAP,
at the same B_t.

Every row plays the same held-out games (seeds 0 on; fine-tuning used seeds 100,000 on) with the same planner:
SmolLM2-135M-Instruct with the TextWorld adapter (brace_training.textworld_finetune_cli) on the CPU (fp32 unless
--dtype), the candidates decoding scoring every admissible command, one command per call at B_t = 512 and SLO_t =
4,500 ms (the `embedded` budget profile's). "Without E-RECAP" compresses the context to B_t minus the memory reserve
by recency (the oldest history yields); "with" prunes inside the model to B_t (the TextWorld predictor trained with
the adapter, Table 8 layers, first cut 1.5 B_t). Memory is in process and fresh for each game, but for GiG's experience
bank: each experience row starts from --experience-store (brace_training.experience_cli: the policy's wins on
training seeds) copied into <out>, and keeps the games it wins (GiG Alg. 1 line 18). GiG's lookahead projects
candidates with the game's own transition model (textworld on a copy). A game ends won, lost, or after --max-steps
world steps.

Games are played seed by seed, every row, and appended to <out>/textworld_memory_<level>_games.csv and _calls.csv as
each ends, so an interrupted run goes on where it stopped (--fresh starts over); the table and
<out>/textworld_memory_<level>.{csv,png} cover every game in the files. --level picks the difficulty ladder's level
(L3 by default: the settings every earlier run used). Targets: the best memory row wins >= 10 points more games than flat history
with the same compressor, and its tokens per call at game step 40 are <= 1.1x those at step 5 (the context a call
reads, before compression); GiG + experience wins >= 10 points more than GiG alone, the best GiG row beats the best
other memory row (games won, then score), and GiG's tokens per call stay within 1.1x from step 5 to step 40.
Exits 1 when a target is missed or rows have not played every game yet.
Run inside the workspace: `source scripts/env.sh && python bench/textworld_memory.py` (--quick: one game, two rows,
a few steps; --avx2: under AVX2 dispatch caps).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from report import (
    append_rows,
    cpu_report,
    describe_cpu,
    fill_defaults,
    load_planner_model,
    print_written,
    read_rows,
    reexec_as_avx2,
    report_checks,
    save_plot,
    write_csv,
)

from sim_bridges.textworld.textworld_games import LEVELS

PROFILE = "embedded"
"""The budget profile whose full_replan SLO and hard-deadline factor every call gets."""
FIRST_CUT = 1.5
ADAPTER = "package://sim_bridges/models/smollm2-135m-instruct-textworld-lora.safetensors"
RECAP_ADAPTER = "package://sim_bridges/models/smollm2-135m-instruct-textworld-recap-lora.safetensors"
"""The ReCAP rows' adapter (brace_training.recap_finetune_cli: π and ρ on the oracle's decomposition)."""
PREDICTOR = "package://sim_bridges/models/smollm2-135m-instruct-textworld-erecap.safetensors"
COMPRESSORS = ("recency", "erecap")
VETO_SUFFIX = " + veto"
"""How --veto names its rows."""
EARLY_STEP, LATE_STEP = 5, 40
WIN_MARGIN_POINTS = 10.0
GROWTH_LIMIT = 1.1


def row_names(configs, compressors) -> list[tuple[str, object, str]]:
    """(row, memory configuration, compressor) for every combination."""
    return [(f"{c.name} / {comp}", c, comp) for c in configs for comp in compressors]


def done_games(path: Path) -> set[tuple[str, int]]:
    """(row, seed) of the games already in the games file."""
    return {(r["row"], int(r["seed"])) for r in read_rows(path)}


def experience_store(row: str, config, args):
    """The experience row's store: a copy of --experience-store in <out>, made at its first game (None: the row
    has no experience module)."""
    if "experience" not in config.modules:
        return None
    import shutil

    from brace_memory.store import MemoryStore

    path = Path(args.out) / f"textworld_memory_bank_{row.replace(' / ', '_')}.sqlite"
    if not path.exists():
        if not args.experience_store.is_file():
            raise SystemExit(f"{args.experience_store}: no experience bank (python -m brace_training.experience_cli "
                             "--world textworld --out <it>)")
        shutil.copyfile(args.experience_store, path)
    return MemoryStore(path)


MAX_FOLLOW_UPS = 16
"""ReCAP rows: calls in a row that open or close a frame without a step to run (the controller's
recap_max_follow_ups); past it the player idles one step."""


def play_game(path, config, seed: int, args, folder: Path, row: str = "") -> tuple[dict, list[dict]]:
    """One game with `path` planning every command: the game's row and its calls' rows. A ReCAP row (recursion)
    calls ρ after every step and serves a call that opened or closed a frame at once; its agreement is the answer's
    S[0] against the oracle's decomposition for the same frame."""
    from brace_common.episode import PATH_EFFICIENCY
    from brace_common.vocabulary import Mode, RecapNeed
    from brace_training.textworld_data import configured, memory_use
    from brace_training.textworld_play import TextWorldSession
    from erecap_planner.call_path import CallRequest
    from sim_bridges.textworld.textworld_decomposition import oracle_answer
    from sim_bridges.textworld.textworld_game import PLAYER, TEXT, WALKTHROUGH_STEPS, TextWorldGame
    from sim_bridges.textworld.textworld_games import GameSpec, generate_game

    memory = memory_use(config, experience_store(row, config, args), args.embed)
    configured(path, config, memory)
    game = TextWorldGame(generate_game(GameSpec(seed).at_level(args.level), folder), args.max_steps)
    calls = []
    try:
        session = TextWorldSession(game, 0, seed, memory.system)
        path.predict = session.project if path.options.veto_lost else None  # the veto projects on the game's copy
        while not game.finished:
            path.set_schema(session.schema())
            step = game.t
            for _ in range(MAX_FOLLOW_UPS if config.recursion else 1):
                mode = Mode.PARTIAL_REPLAN if config.recursion else session.mode()
                expected = oracle_answer(game, memory.system.recap_goal(PLAYER))[1][:1] \
                    if config.recursion else None
                out = path.run(session.buffer, CallRequest(PLAYER, args.budget, args.slo_ms, args.hard_deadline_ms,
                                                           int(mode), step))
                agree = game.agrees(out.steps) if not config.recursion else \
                    out.recap is not None and out.recap.subtasks[:1] == expected
                retrieve = next((p for p in out.phases if p.phase == "retrieve"), None)
                calls.append({"step": step, "status": int(out.status), "tokens_before": out.tokens_before,
                              "tokens_after": out.tokens_after, "latency_ms": round(out.latency_ms, 1),
                              "slo_met": int(out.slo_met),
                              "retrieve_ms": round(retrieve.duration_ms, 2) if retrieve else 0,
                              "memory_tokens": retrieve.tokens_out if retrieve else 0, "oracle_agreement": int(agree),
                              "recap_call": int(out.recap.kind) if out.recap else 0, "vetoed": len(out.vetoed),
                              "depth": out.recap.depth if out.recap else 0})
                if out.steps or out.recap is None or out.recap.need not in (RecapNeed.DECOMPOSE, RecapNeed.REFINE):
                    break
            if out.steps:
                session.play(str(out.steps[0].parameters.get(TEXT, "")), mode)
            else:
                session.idle()
        session.end()
        metrics = game.metrics().metrics
        result = {"seed": seed, "won": int(game.won), "lost": int(game.lost), "score": game.score,
                  "max_score": game.max_score, "steps": game.t, "calls": len(calls),
                  WALKTHROUGH_STEPS: metrics[WALKTHROUGH_STEPS], PATH_EFFICIENCY: metrics[PATH_EFFICIENCY]}
        return result, calls
    finally:
        game.close()
        memory.system.close()


def at_step(calls: list[dict], step: int, column: str) -> float:
    """Mean of `column` over the calls made at game step `step` (nan when no game was still running then)."""
    values = [float(c[column]) for c in calls if int(c["step"]) == step]
    return float(np.mean(values)) if values else float("nan")


def number(value: float, digits: int = 0):
    """`value` rounded, or '' when no call was made (nan)."""
    return "" if value != value else round(value, digits) if digits else round(value)


def summary(rows: list[str], games: list[dict], calls: list[dict]) -> list[dict]:
    """One line per row over every game in the files."""
    out = []
    for row in rows:
        g = [r for r in games if r["row"] == row]
        c = [r for r in calls if r["row"] == row]
        if not g:
            continue
        lat = [float(r["latency_ms"]) for r in c]
        early_b, late_b = at_step(c, EARLY_STEP, "tokens_before"), at_step(c, LATE_STEP, "tokens_before")
        out.append({
            "row": row, "games": len(g), "won_pct": round(100 * np.mean([int(r["won"]) for r in g]), 1),
            "score_pct": round(100 * np.mean([int(r["score"]) / max(1, int(r["max_score"])) for r in g]), 1),
            "lost": sum(int(r["lost"]) for r in g), "steps": round(np.mean([int(r["steps"]) for r in g]), 1),
            "calls": len(c), f"tokens_before_step{EARLY_STEP}": number(early_b),
            f"tokens_before_step{LATE_STEP}": number(late_b), "tokens_growth": number(late_b / early_b, 2),
            f"tokens_after_step{EARLY_STEP}": number(at_step(c, EARLY_STEP, "tokens_after")),
            "tokens_after_mean": round(np.mean([int(r["tokens_after"]) for r in c])),
            "memory_tokens_mean": round(np.mean([int(r["memory_tokens"]) for r in c]), 1),
            "retrieve_ms_p95": round(float(np.percentile([float(r["retrieve_ms"]) for r in c], 95)), 2),
            "p50_ms": round(float(np.percentile(lat, 50))), "p95_ms": round(float(np.percentile(lat, 95))),
            "slo_violation_pct": round(100 * (1 - np.mean([int(r["slo_met"]) for r in c])), 1),
            "oracle_agreement_pct": round(100 * np.mean([int(r["oracle_agreement"]) for r in c]), 1),
            "vetoed": sum(int(r.get("vetoed") or 0) for r in c)})
    return out


def checks(table: list[dict], games_wanted: int) -> list[tuple[str, bool, str]]:
    """The issue's targets on the summary."""
    by = {r["row"]: r for r in table}
    out = [(f"every row played {games_wanted} games", all(r["games"] >= games_wanted for r in table),
            ", ".join(f"{r['row']} {r['games']}" for r in table))]
    for comp in COMPRESSORS:
        flat = by.get(f"flat / {comp}")
        memory = [r for r in table if r["row"].endswith(f"/ {comp}") and not r["row"].startswith("flat")]
        if not flat or not memory:
            continue
        best = max(memory, key=lambda r: (r["won_pct"], r["score_pct"]))
        out.append((f"best memory row wins >= {WIN_MARGIN_POINTS:.0f} points more than flat ({comp})",
                    best["won_pct"] >= flat["won_pct"] + WIN_MARGIN_POINTS,
                    f"{best['row']} {best['won_pct']}% vs flat {flat['won_pct']}%"))
        growth = best["tokens_growth"]
        out.append((f"{best['row']}: tokens per call at step {LATE_STEP} <= {GROWTH_LIMIT}x step {EARLY_STEP}",
                    growth != "" and growth <= GROWTH_LIMIT, f"{growth}x (flat {flat['tokens_growth']}x)"))
    gig = [r for r in table if r["row"].startswith("gig")]
    others = [r for r in table if not r["row"].startswith(("gig", "flat"))]
    for comp in COMPRESSORS:
        alone, exp = by.get(f"gig / {comp}"), by.get(f"gig_experience / {comp}")
        if alone and exp:
            out.append((f"GiG + experience wins >= {WIN_MARGIN_POINTS:.0f} points more than GiG ({comp})",
                        exp["won_pct"] >= alone["won_pct"] + WIN_MARGIN_POINTS,
                        f"{exp['won_pct']}% vs {alone['won_pct']}%"))
    if gig and others:
        best_gig = max(gig, key=lambda r: (r["won_pct"], r["score_pct"]))
        best_other = max(others, key=lambda r: (r["won_pct"], r["score_pct"]))
        out.append(("the best GiG row beats the best other memory row",
                    (best_gig["won_pct"], best_gig["score_pct"]) > (best_other["won_pct"], best_other["score_pct"]),
                    f"{best_gig['row']} {best_gig['won_pct']}% won, {best_gig['score_pct']}% score vs "
                    f"{best_other['row']} {best_other['won_pct']}%, {best_other['score_pct']}%"))
        flat_growth = [r["tokens_growth"] for r in gig if r["tokens_growth"] != ""]
        out.append((f"GiG rows: tokens per call at step {LATE_STEP} <= {GROWTH_LIMIT}x step {EARLY_STEP}",
                    bool(flat_growth) and max(flat_growth) <= GROWTH_LIMIT,
                    ", ".join(f"{r['row']} {r['tokens_growth']}x" for r in gig)))
    return out


def draw_tokens(rows: list[str], calls: list[dict], budget: int):
    """Tokens a call reads (before compression) against the game step, one line per row."""
    def draw(plt):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for row in rows:
            c = [r for r in calls if r["row"] == row]
            steps = sorted({int(r["step"]) for r in c})
            if steps:
                ax.plot(steps, [at_step(c, s, "tokens_before") for s in steps], label=row)
        ax.axhline(budget, color="grey", ls=":", label="B_t")
        ax.set_xlabel("game step")
        ax.set_ylabel("context tokens per call (before compression)")
        ax.set_title("TextWorld cooking: context a call reads")
        ax.legend(fontsize=7)
        return fig
    return draw


def main() -> int:
    """Play the rows' games (those not in the output files yet), print the table, check the targets."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--avx2", action="store_true", help="run under AVX2 dispatch caps (scripts/avx2.sh)")
    parser.add_argument("--games", type=int, default=None, help="held-out games per row (seeds 0 on)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--level", choices=tuple(LEVELS), default="L3",
                        help="difficulty ladder level (L1 one room, one ingredient; L2 two in six rooms, cooked and "
                        "cut; L3 three in nine): each level keeps its own files in --out")
    parser.add_argument("--max-steps", type=int, default=None, help="world steps before an unfinished game fails")
    parser.add_argument("--rows", nargs="*", default=None, help="rows to play (default: all)")
    parser.add_argument("--budget", type=int, default=None, help="B_t of every call (default 512)")
    parser.add_argument("--slo-ms", type=float, default=None, help=f"SLO_t (default: the '{PROFILE}' profile's)")
    parser.add_argument("--adapter", default=ADAPTER)
    parser.add_argument("--recap-adapter", default=RECAP_ADAPTER, help="the ReCAP rows' adapter")
    parser.add_argument("--dtype", default="float32", help="float32 (what any CPU runs) | bfloat16 | auto")
    parser.add_argument("--predictor", default=PREDICTOR, help="E-RECAP predictor bank (textworld_finetune_cli's)")
    parser.add_argument("--game-dir", type=Path, default=Path("~/.cache/brace/textworld").expanduser())
    parser.add_argument("--experience-store", type=Path,
                        default=Path("~/.cache/brace_ros/experience/textworld.sqlite").expanduser(),
                        help="GiG's experience bank the experience rows start from (brace_training.experience_cli)")
    parser.add_argument("--encoder", default="", help="GiG's scene-graph encoder for the experience rows "
                        "(state_encoder_cli's folder; empty = keys only: a held-out game's state matches no other's)")
    parser.add_argument("--veto", action="store_true", help="the lookahead veto (erecap_planner.veto) on every row "
                        "but ReCAP's: rows named '<row> + veto'")
    parser.add_argument("--fresh", action="store_true", help="forget the games already in the output files")
    parser.add_argument("--out", default="bench/out")
    args = parser.parse_args()
    if args.avx2:
        reexec_as_avx2()
    fill_defaults(args, {"games": 1, "max_steps": 2}, {"games": 50, "max_steps": 80})
    from brace_common.vocabulary import Mode
    from brace_controller.config import default_profiles_path, load_profiles
    from brace_training.textworld_data import TOKEN_BUDGET

    profile = load_profiles(default_profiles_path())[PROFILE]
    args.budget = args.budget or TOKEN_BUDGET
    args.slo_ms = args.slo_ms or profile.modes[Mode.FULL_REPLAN].slo_ms
    args.hard_deadline_ms = args.slo_ms * profile.hard_deadline_factor
    # heavy: torch and the planner load after the dispatch caps are set
    from brace_common.config import resolve_path
    from brace_training.textworld_data import CONFIGS, GIG_CONFIGS, RECAP_CONFIGS, memory_use
    from erecap_planner.call_path import CallOptions, LocalModel, PlannerCallPath
    from erecap_planner.predictor import PredictorBank
    from erecap_planner.pruning import PruneSchedule, table8_layers

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"textworld_memory_{args.level}"
    games_csv, calls_csv = out / f"{stem}_games.csv", out / f"{stem}_calls.csv"
    if args.fresh or args.quick:
        for p in (games_csv, calls_csv):
            p.unlink(missing_ok=True)
    rows = row_names(CONFIGS + RECAP_CONFIGS + GIG_CONFIGS, COMPRESSORS)
    if args.quick:
        rows = [rows[0], rows[-1]]
    if args.rows:
        unknown = set(args.rows) - {r[0] for r in rows}
        if unknown:
            parser.error(f"unknown rows {sorted(unknown)}; rows: {[r[0] for r in rows]}")
        rows = [r for r in rows if r[0] in args.rows]
    if args.veto and any(config.recursion for _, config, _ in rows):
        parser.error("--veto: the ReCAP rows do not take the veto yet (pick the others with --rows)")
    suffix = VETO_SUFFIX if args.veto else ""
    cpu = cpu_report()
    predictor = args.predictor
    args.embed = None
    if args.encoder:
        from brace_memory.state_encoder import StateEncoder

        args.embed = StateEncoder.load(Path(args.encoder).expanduser()).embed
    model, tok = load_planner_model(args.adapter, "cpu", args.dtype)
    recap_model = load_planner_model(args.recap_adapter, "cpu", args.dtype)[0] \
        if any(config.recursion for _, config, _ in rows) else None
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    bank = PredictorBank.load(resolve_path(predictor), model.config)
    schedule = PruneSchedule(tuple(table8_layers(model.config.num_hidden_layers)), 0.7, first_cut=FIRST_CUT)
    print(f"# TextWorld cooking {args.level}, held-out seeds {args.first_seed}..{args.first_seed + args.games - 1}, B_t "
          f"{args.budget}, SLO {args.slo_ms:.0f} ms, {dtype} on {describe_cpu(cpu)}", flush=True)
    done = done_games(games_csv)
    paths = {name: PlannerCallPath(LocalModel(recap_model if config.recursion else model, tok, schedule,
                                              bank if comp == "erecap" else None),
                                   CallOptions(compressor=comp, decoding="constrained" if config.recursion else
                                               "candidates", layout=config.layout, recursion=config.recursion,
                                               veto_lost=args.veto),
                                   memory=memory_use(config) if config.recursion else None)
             for name, config, comp in rows}
    # Seed by seed, every row: an interrupted run leaves the rows equally far.
    for seed in range(args.first_seed, args.first_seed + args.games):
        for row, config, _ in rows:
            name = row + suffix
            if (name, seed) in done:
                continue
            started = time.monotonic()
            result, calls = play_game(paths[row], config, seed, args, args.game_dir, row)
            append_rows([{"row": name, **result, "cpu": cpu["cpu"], "torch_capability": cpu["torch_capability"],
                          "dtype": dtype}], games_csv)
            append_rows([{"row": name, "seed": seed, **c} for c in calls], calls_csv)
            print(f"{name:28s} seed {seed:3d}: {'won ' if result['won'] else 'lost' if result['lost'] else '----'} "
                  f"score {result['score']}/{result['max_score']} in {result['steps']} steps "
                  f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    names = [r[0] + end for r in row_names(CONFIGS + RECAP_CONFIGS + GIG_CONFIGS, COMPRESSORS)
             for end in ("", VETO_SUFFIX)]  # the rows of a run with --veto beside those of one without
    table = summary(names, read_rows(games_csv), read_rows(calls_csv))
    columns = list(table[0]) if table else []
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in table:
        print("| " + " | ".join(str(r[c]) for c in columns) + " |")
    csv_path = write_csv([{**r, "level": args.level, "cpu": cpu["cpu"], "torch_capability": cpu["torch_capability"],
                           "dtype": dtype} for r in table], out / f"{stem}.csv")
    png = save_plot(out / f"{stem}.png", draw_tokens(names, read_rows(calls_csv), args.budget))
    print_written(csv_path, png)
    return report_checks(checks(table, args.games))


if __name__ == "__main__":
    sys.exit(main())
