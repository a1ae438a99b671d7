"""Interleaved, un-profiled repeats of several configurations in one job, with a confidence interval each.

    torchrun --standalone --nproc_per_node=2 -m ddp_profile.harness.repeats run --configs FILE --out DIR \\
        [--repeats 5] [--deadline-at EPOCH_S] [--host LABEL] [--resume]
    python -m ddp_profile.harness.repeats run --configs FILE --out DIR --nproc 2      (CPU, gloo: tests)
    python -m ddp_profile.harness.repeats summarize --out DIR [--host LABEL]

**Protocol.** The configurations of FILE run in rounds, A B C … A B C …, ``--repeats`` rounds, all in one
process per rank (one torchrun job): each *repeat* builds the model, wraps it, makes the optimizer and the
data afresh (``ddp_profile.harness.train.run``, nothing profiled), runs the configuration's warm-up and
measured steps and frees everything again. The job's process group, CUDA contexts and NCCL communicators are
shared by all repeats, which is what makes ≥ 5 rounds of XL fit one machine call (a process start costs
tens of seconds; a rebuild a few). Interleaving puts slow drifts (clocks, temperature, a neighbour) on every
configuration alike instead of on whichever ran last.

* ``--strategy none`` is the 1-GPU configuration: rank 0 trains alone on its GPU (world size 1, no
  collective: :func:`ddp_profile.harness.strategies.solo`) while the other ranks wait at a host barrier.
* A configuration with NCCL levers (``--nccl-channels``, ``--nccl-high-priority``, ``--nccl-min-ctas``) runs its collectives on
  its own process group made with those options (``launch.new_lever_group``, created once at start); the
  others use the default group, whose options are NCCL's defaults.
* Before and after each repeat rank 0 records ``nvidia-smi`` (clocks, temperature, power, throttle reasons:
  :mod:`ddp_profile.harness.gpu_state`).
* **Deadline.** Before each repeat rank 0 checks that it is expected to end by ``--deadline-at`` (the
  configuration's slowest repeat so far, + 20 %, or ``--first-estimate-s`` before its first); a repeat that
  would not fit is skipped and listed (``skipped`` in the JSON and ``skipped.txt``), never killed midway.

Every finished repeat is appended to ``DIR/repeats.jsonl`` at once, so a job killed or crashed keeps what it
measured; ``--resume`` continues such a job, skipping repeats already done and dropping a configuration whose
repeat started but never finished (it is listed as failed). ``summarize`` (also run at the end of ``run``)
lists every repeat the journal saw start and never end with the skipped ones (:data:`UNFINISHED`), and
writes per configuration ``DIR/<run>/<run>.json``: the first repeat's run record, with every repeat's
per-step times (``repeats``), the pooled median and the bootstrap interval ``unprofiled_ci_low_ms`` /
``unprofiled_ci_high_ms`` (:mod:`ddp_profile.harness.spread`), and the interleaving order.

FILE: one configuration per line as harness options (``--strategy torch_ddp --bucket-mb 25 ...``, those of
``python -m ddp_profile.harness``); a line ``common OPTIONS`` puts OPTIONS before every later line (until
the next ``common``); ``#`` starts a comment. Torch, nvtx and the standard library only.
"""  # noqa: E501

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import shlex
import sys
import time
import traceback
from pathlib import Path

from ddp_profile.errors import UsageError, run_main
from ddp_profile.harness import gpu_state, spread
from ddp_profile.harness.config import RunConfig, run_name
from ddp_profile.safeio import write_record_atomic, write_text_atomic

JOURNAL = "repeats.jsonl"
SKIPPED = "skipped.txt"
PROTOCOL = "interleaved-repeats"
DEFAULT_FIRST_ESTIMATE_S = 25.0
MARGIN = 1.2
"""A repeat is expected to take its configuration's slowest repeat so far times MARGIN."""
PER_REPEAT_KEYS = (
    "step_ms_per_rank",
    "host_step_ms_per_rank",
    "step_ms_slowest_rank",
    "step_ms_median",
    "final_loss_per_rank",
    "setup_s",
    "date_utc",
)
"""Run-record keys that differ between repeats: kept per repeat, not at the top of the summary."""


# ---------------------------------------------------------------- configurations and order


def parse_configs(text: str, where: str = "configs") -> list[RunConfig]:
    """The configurations of a configs file's text (module docstring); UsageError naming the line."""
    from ddp_profile.harness.bench import add_arguments, config_from_args

    parser = argparse.ArgumentParser(prog="repeats config line", add_help=False, exit_on_error=False)
    add_arguments(parser)
    common: list[str] = []
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "common":
            common = words[1:]
            continue
        try:
            args, extra = parser.parse_known_args([*common, *words])
            if extra:
                raise UsageError(f"unknown options {' '.join(extra)}")
            cfg = config_from_args(args)
        except (argparse.ArgumentError, UsageError, ValueError) as exc:
            raise UsageError(f"{where}:{n}: {exc}") from None
        if any(lever_key(cfg)) and (cfg.strategy == "fsdp" or cfg.shard_optimizer):
            raise UsageError(
                f"{where}:{n}: NCCL levers run on their own group, which fsdp and shard_optimizer "
                "do not take; time them with scripts/campaign.sh"
            )
        out.append(cfg)
    if not out:
        raise UsageError(f"{where}: no configuration")
    return out


def interleaved_order(configs: int, repeats: int) -> list[tuple[int, int]]:
    """(repeat, configuration index) pairs in run order: round by round, A B C A B C … (repeats from 1)."""
    return [(r, c) for r in range(1, repeats + 1) for c in range(configs)]


def is_solo(cfg: RunConfig) -> bool:
    """The 1-GPU configuration: strategy none trains on rank 0 alone."""
    return cfg.strategy == "none"


NO_LEVERS = (0, False, 0)
"""The lever key of a configuration on the default group (NCCL's defaults)."""


def lever_key(cfg: RunConfig) -> tuple[int, bool, int]:
    """The NCCL options a configuration's process group needs: (nccl_channels, nccl_high_priority, nccl_min_ctas)."""
    return cfg.nccl_channels, cfg.nccl_high_priority, cfg.nccl_min_ctas


def fits(now: float, expected_s: float, deadline_at: float | None) -> str:
    """ "run" when a repeat expected to take ``expected_s`` ends by ``deadline_at`` (Unix seconds; None: no
    deadline), else the reason it is skipped."""
    if deadline_at is None or now + expected_s <= deadline_at:
        return "run"
    return f"deadline: ~{expected_s:.0f} s needed, {max(0.0, deadline_at - now):.0f} s left"


# ---------------------------------------------------------------- the journal


def _now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def read_journal(out: Path) -> list[dict]:
    """The journal's events in order (a torn last line, from a kill, is ignored)."""
    path = out / JOURNAL
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def _append(out: Path, event: dict) -> None:
    with open(out / JOURNAL, "a", encoding="utf-8") as f:
        f.write(json.dumps(event) + "\n")
        f.flush()


def journal_state(events: list[dict]) -> tuple[set, set]:
    """(done, failed): (repeat, config index) pairs finished, and configuration indices with a repeat
    started but never finished."""
    started, done = set(), set()
    for e in events:
        key = (e.get("repeat"), e.get("config_index"))
        if e.get("event") == "start":
            started.add(key)
        elif e.get("event") == "done":
            done.add(key)
    return done, {c for (_, c) in started - done}


# ---------------------------------------------------------------- one job


def _decide(rank: int, world_size: int, value):
    """Rank 0's value on every rank (one tiny broadcast outside any timed step)."""
    if world_size == 1:
        return value
    import torch.distributed as dist

    box = [value if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _free(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def run_job(
    configs: list[RunConfig],
    repeats: int,
    out: Path,
    device,
    backend: str,
    deadline_at: float | None,
    first_estimate_s: float,
    resume: bool,
) -> dict:
    """The interleaved loop on this rank (module docstring); returns {"skipped": [...], "failed": [...]}
    on rank 0 ({} elsewhere)."""
    from ddp_profile.harness import train
    from ddp_profile.harness.launch import new_lever_group
    from ddp_profile.harness.strategies import solo, use_group, world

    rank, world_size = world()
    events = read_journal(out) if (resume and rank == 0) else []
    done, failed = _decide(rank, world_size, journal_state(events))
    if rank == 0 and not resume:
        (out / JOURNAL).unlink(missing_ok=True)
    groups: dict = {NO_LEVERS: (None, None)}
    broken: dict = {}  # lever key -> why its group could not be made (its configurations are skipped)
    if world_size > 1:
        for key in sorted({lever_key(c) for c in configs if not is_solo(c)} - {NO_LEVERS}):
            try:
                groups[key] = new_lever_group(backend, device, *key)
            except (RuntimeError, ValueError, TypeError) as exc:  # e.g. an NCCL build without these options
                broken[key] = f"no process group with these NCCL options: {exc}"[:300]
                print(f"!! {broken[key]}", file=sys.stderr, flush=True)
    gpu = train.gpu_short_name(device)
    names = [run_name(cfg, 1 if is_solo(cfg) else world_size, gpu) for cfg in configs]
    slowest: dict[int, float] = {}  # configuration index -> its slowest repeat's wall time so far, s
    for e in events:
        if e.get("event") == "done" and isinstance(e.get("wall_s"), (int, float)):
            slowest[e["config_index"]] = max(slowest.get(e["config_index"], 0.0), float(e["wall_s"]))
    for r, c in interleaved_order(len(configs), repeats):
        cfg = configs[c]
        label = f"repeat {r} of {names[c]}"
        if (r, c) in done:
            continue
        verdict = "run"
        if rank == 0:
            verdict = (
                "failed earlier (a repeat of it started and never finished)"
                if c in failed
                else broken[lever_key(cfg)]
                if lever_key(cfg) in broken and not is_solo(cfg)
                else fits(time.time(), MARGIN * slowest.get(c, first_estimate_s), deadline_at)
            )
        verdict = _decide(rank, world_size, verdict)
        if verdict != "run":
            if rank == 0:
                _append(
                    out, {"event": "skip", "repeat": r, "config_index": c, "run": names[c], "why": verdict}
                )
                print(f"-- skip {label}: {verdict}", flush=True)
            continue
        t0 = time.time()
        before = gpu_state.query() if rank == 0 and device.type == "cuda" else None
        if rank == 0:
            _append(out, {"event": "start", "repeat": r, "config_index": c, "started_utc": _now_utc()})
        if is_solo(cfg):
            record = None
            if rank == 0:
                with solo():
                    record = train.run(cfg, device)
                if record is not None:
                    record["nccl_levers"] = {
                        "backend": None,
                        "note": "1-GPU configuration: rank 0 alone, no collectives",
                    }
            train.host_barrier("repeats-solo")
        else:
            group, levers = groups[lever_key(cfg)]
            with use_group(group):
                record = train.run(cfg, device)
            if record is not None and levers is not None:
                record["nccl_levers"] = levers
        _free(device)
        if rank == 0 and record is not None:
            wall = time.time() - t0
            slowest[c] = max(slowest.get(c, 0.0), wall)
            after = gpu_state.query() if device.type == "cuda" else None
            _append(
                out,
                {
                    "event": "done",
                    "repeat": r,
                    "config_index": c,
                    "wall_s": round(wall, 3),
                    "record": record,
                    "gpu_before": before,
                    "gpu_after": after,
                },
            )
            print(f"   {label}: median {record['step_ms_median']:.2f} ms, {wall:.1f} s", flush=True)
    if rank != 0:
        return {}
    return {"skipped": [e for e in read_journal(out) if e.get("event") == "skip"]}


# ---------------------------------------------------------------- summary


def _gpu_rows(snapshot: dict | None) -> dict | None:
    if snapshot is None:
        return None
    return {k: v for k, v in snapshot.items() if k != "raw"}


def summarize(
    out: Path,
    host: str | None = None,
    resamples: int = spread.DEFAULT_RESAMPLES,
    seed: int = spread.DEFAULT_SEED,
) -> list[Path]:
    """Write ``<run>/<run>.json`` per configuration from the journal (module docstring) and ``skipped.txt``;
    returns the JSON paths. Each finished repeat counts; a repeat's step time is its slowest rank's."""
    events = read_journal(out)
    finished = [e for e in events if e.get("event") == "done" and isinstance(e.get("record"), dict)]
    skipped = [e for e in events if e.get("event") == "skip"] + unfinished(events, finished)
    lines = [f"repeat {e.get('repeat')} of {e.get('run')}: {e.get('why')}" for e in skipped]
    write_text_atomic(
        out / SKIPPED, "".join(f"{line}\n" for line in lines) or "nothing skipped\n", make_parents=True
    )
    if not finished:
        raise UsageError(
            f"{out / JOURNAL}: no finished repeat to summarize ({len(skipped)} skipped; see {out / SKIPPED})"
        )
    order = [e["record"]["run"] for e in finished]
    by_run: dict[str, list[dict]] = {}
    for e in finished:
        by_run.setdefault(e["record"]["run"], []).append(e)
    paths = []
    for name, evs in by_run.items():
        evs = sorted(evs, key=lambda e: e["repeat"])
        reps = [[float(v) for v in e["record"]["step_ms_slowest_rank"]] for e in evs]
        interval = spread.bootstrap_median(reps, resamples=resamples, seed=seed)
        summary = {k: v for k, v in evs[0]["record"].items() if k not in PER_REPEAT_KEYS}
        summary.update(interval.fields())
        summary["step_ms_median"] = (
            interval.median_ms
        )  # nothing was profiled: the run's step is the un-profiled one
        summary["unprofiled_repeat_medians_ms"] = [spread.upper_median(r) for r in reps]
        summary["unprofiled_step_ms_min"] = min(v for r in reps for v in r)
        summary["unprofiled_step_ms_max"] = max(v for r in reps for v in r)
        summary["profiler_overhead_pct"] = None
        summary["timing_protocol"] = {
            "kind": PROTOCOL,
            "order": order,
            "configurations": len(by_run),
            "process": "one job for every repeat; each repeat rebuilds model, wrapper, optimizer and data",
            "one_gpu": "strategy none: rank 0 alone on its GPU while the other ranks wait",
        }
        summary["repeats"] = [
            {
                "repeat": e["repeat"],
                "position": _position(finished, e),
                "wall_s": e.get("wall_s"),
                **{k: e["record"].get(k) for k in PER_REPEAT_KEYS},
                "gpu_before": _gpu_rows(e.get("gpu_before")),
                "gpu_after": _gpu_rows(e.get("gpu_after")),
            }
            for e in evs
        ]
        summary["skipped"] = [
            {"repeat": e["repeat"], "why": e["why"]} for e in skipped if e.get("run") == name
        ]
        if host is not None:
            summary["host"] = host
        path = out / name / f"{name}.json"
        write_record_atomic(path, summary, make_parents=True)
        paths.append(path)
    return paths


UNFINISHED = "started and never finished (its job was killed or died)"
"""Why a repeat whose ``start`` event has no ``done`` or ``skip`` after it is listed with the skipped ones."""


def unfinished(events: list[dict], finished: list[dict]) -> list[dict]:
    """Skip-like events (repeat, run, why) for the repeats the journal saw start and never end: a job killed
    by the watchdog or its deadline, or dead, mid-repeat. The run is named from the configuration's finished
    repeats (a start event has its index only)."""
    ended = {(e.get("repeat"), e.get("config_index")) for e in events if e.get("event") in ("done", "skip")}
    names = {e.get("config_index"): e["record"].get("run") for e in finished}
    return [
        {
            "event": "skip",
            "repeat": e.get("repeat"),
            "config_index": e.get("config_index"),
            "run": names.get(e.get("config_index"), f"configuration {e.get('config_index')}"),
            "why": UNFINISHED,
        }
        for e in events
        if e.get("event") == "start" and (e.get("repeat"), e.get("config_index")) not in ended
    ]


def _position(finished: list[dict], event: dict) -> int:
    """1-based place of a finished repeat in the job's run order."""
    return next(i for i, e in enumerate(finished, 1) if e is event)


# ---------------------------------------------------------------- command line


def _worker(info, configs, args) -> None:
    """One rank of a local gloo job (``--nproc N``), spawned by launch.spawn_local."""
    import torch

    _job_on_rank(configs, args, torch.device("cpu"), "gloo")


def _job_on_rank(configs, args, device, backend: str) -> None:
    from ddp_profile.harness.strategies import world

    out = Path(args.out)
    rank, _ = world()
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    result = run_job(
        configs, args.repeats, out, device, backend, args.deadline_at, args.first_estimate_s, args.resume
    )
    if rank == 0:
        paths = summarize(out, args.host)
        print(
            f"wrote {len(paths)} run JSONs under {out}; skipped {len(result['skipped'])} repeats", flush=True
        )


def _run(args: argparse.Namespace) -> int:
    path = Path(args.configs)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the configuration list ({exc.strerror or exc})") from None
    configs = parse_configs(text, str(path))
    if args.repeats < 1:
        raise UsageError(f"--repeats must be >= 1, got {args.repeats}")
    from ddp_profile.harness.launch import (
        arm_stack_dump,
        default_backend,
        device_for,
        init_process_group,
        spawn_local,
        torchrun_env,
    )

    info = torchrun_env()
    if info is None:
        if args.nproc > 1:
            spawn_local(args.nproc, _worker, [c.replace(backend="gloo") for c in configs], args)
            return 0
        import torch

        on_gpu = default_backend("") == "nccl"
        _job_on_rank(configs, args, torch.device("cuda", 0) if on_gpu else torch.device("cpu"), "")
        return 0
    import torch.distributed as dist

    arm_stack_dump()
    backend = default_backend(configs[0].backend)
    device = device_for(backend, info.local_rank)
    init_process_group(info, backend)
    try:
        _job_on_rank(configs, args, device, backend)
    except BaseException:  # noqa: BLE001 - any failure of this rank ends it at once
        # A rank that failed (out of memory, an NCCL error) must not tear its group down: destroying an NCCL
        # communicator waits for peers that are blocked in a collective or a barrier and never come, which
        # hung a job for minutes. Exit now; torchrun then stops the other ranks, and the journal keeps what
        # finished (scripts/timing_repeats.sh resumes without the configuration that failed).
        traceback.print_exc()
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _summarize(args: argparse.Namespace) -> int:
    paths = summarize(Path(args.out), args.host)
    for p in paths:
        rec = json.loads(p.read_text(encoding="utf-8"))
        print(
            f"{rec['run']}: median {rec['unprofiled_step_ms_median']:.2f} ms, 95 % interval "
            f"{rec['unprofiled_ci_low_ms']:.2f}–{rec['unprofiled_ci_high_ms']:.2f} ms over "
            f"{rec['unprofiled_repeats']} repeats ({rec['unprofiled_steps']} steps)"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ddp_profile.harness.repeats",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run the configurations interleaved, then summarize")
    run_p.add_argument(
        "--configs", required=True, help="configuration list (one line of harness options each)"
    )
    run_p.add_argument("--repeats", type=int, default=5, help="rounds over every configuration (default 5)")
    run_p.add_argument(
        "--deadline-at",
        type=float,
        default=None,
        help="Unix time by which every repeat must be expected to end; later ones are skipped",
    )
    run_p.add_argument(
        "--first-estimate-s",
        type=float,
        default=DEFAULT_FIRST_ESTIMATE_S,
        help=f"expected seconds of a configuration's first repeat (default {DEFAULT_FIRST_ESTIMATE_S:.0f})",
    )
    run_p.add_argument(
        "--resume", action="store_true", help="continue the journal in --out instead of starting afresh"
    )
    run_p.add_argument(
        "--nproc", type=int, default=1, help="without torchrun: spawn N local gloo CPU processes"
    )
    for p in (run_p, sub.add_parser("summarize", help="write the per-configuration JSONs from the journal")):
        p.add_argument("--out", required=True, help="folder of the journal and the run JSONs")
        p.add_argument("--host", default=None, help="machine label to record (never the real host name)")
        p.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    args = parser.parse_args(argv)
    handler = _run if args.command == "run" else _summarize
    return run_main("python -m ddp_profile.harness.repeats", handler, args, debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
