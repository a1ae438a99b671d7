"""Lay out the what-if ledger from an unpacked stack_whatif_campaign.sh result.

    python scripts/whatif/make_ledger.py CAMPAIGN_TRACES_DIR [--into traces/whatif]

CAMPAIGN_TRACES_DIR is the campaign's ``traces/whatif-runs`` folder: ``<job>/{profiled.sqlite.xz,truth.json}``
(the profiled baselines) and ``repeats/<rule>/repeats.json`` (the interleaved repeats). For every rule with
repeats this writes ``<into>/<rule>--<job>/ledger.json``; each baseline export and its truth go to the
folder of the first rule (in gpt2_whatif.RULES order) that uses the job, and the other rules of that job
point at them by a relative path. Only the campaign's own files are copied and arranged: no measurement is
computed here. Existing ledger folders of the same rules are replaced; the others are kept, so a campaign that
runs only some rules (NAMES=... RULES=...) adds its pairs beside the earlier ones, each with the campaign's
machine.txt when the ledger's shared one describes another campaign.

ledger.json: rule, job, change, command_baseline, command_changed (the un-profiled jobs alone),
command_profiled (how the export was made), command_repeats (how the repeats were run: every rule's in one
process, one rule after another), world_size,
gpu_name, protocol, profiled (relative path of the export), profiled_truth (relative path of the profiled
run's truth.json), profiled_truth_step_ms ([rank][step] loop periods of the captured steps, CUDA events),
repeats ([{order, variant, warmup_steps, step_ms, step_ms_per_rank, iter_ms_per_rank}]), step_ms_definition,
baseline_config, changed_config, extra_gemms_per_step, slow_rank, torch_version, nccl_version, date_utc.
"""

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_whatif import RULES  # noqa: E402

LAUNCH = "torchrun --standalone --nproc_per_node={world} scripts/whatif/gpt2_whatif.py"
NSYS = ("nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none --capture-range=cudaProfilerApi "
        "--capture-range-end=stop -o {job}")
STEP_MS = ("per recorded step, the mean over ranks of that step's loop period: CUDA event at the step's start to "
           "the event at the next step's start on the same rank (step_ms_per_rank holds each rank's)")


def program_args(command):
    """The program's own options from a truth 'command' (argv), without its scratch --out folder."""
    words = command.split()[1:]
    out = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        if w == "--out":
            skip = True
            continue
        out.append(w)
    return " ".join(out)


def run_order(runs):
    """The rules of the repeats process whose records lack their command, in the order they ran (their records'
    dates; one process runs its rules one by one)."""
    found = []
    for rule in RULES:
        path = os.path.join(runs, "repeats", rule, "repeats.json")
        if os.path.exists(path):
            with open(path) as fh:
                rep = json.load(fh)
            if "command" not in rep:
                found.append((rep["date_utc"], list(RULES).index(rule), rule))
    return [rule for _, _, rule in sorted(found)]


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", help="the campaign's traces/whatif-runs folder")
    p.add_argument("--into", default="traces/whatif")
    a = p.parse_args()
    os.makedirs(a.into, exist_ok=True)
    home = {}  # job -> folder name holding its export
    made = []
    ran = run_order(a.runs)
    for key, (job, change, _) in RULES.items():
        rule = key.split("@")[0]  # "<rule>@<tag>": the rule's second job
        rep_path = os.path.join(a.runs, "repeats", key, "repeats.json")
        if not os.path.exists(rep_path):
            print(f"{key}: no repeats in {a.runs}; skipped", file=sys.stderr)
            continue
        with open(rep_path) as fh:
            rep = json.load(fh)
        folder = f"{rule}--{job}"
        dest = os.path.join(a.into, folder)
        if os.path.isdir(dest):
            shutil.rmtree(dest)
        os.makedirs(dest)
        profiled = truth = None
        src = os.path.join(a.runs, job)
        if job not in home and os.path.exists(os.path.join(src, "profiled.sqlite.xz")):
            shutil.copyfile(os.path.join(src, "profiled.sqlite.xz"), os.path.join(dest, "profiled.sqlite.xz"))
            shutil.copyfile(os.path.join(src, "truth.json"), os.path.join(dest, "truth.json"))
            home[job] = folder
        if job in home:
            base = "" if home[job] == folder else f"../{home[job]}/"
            profiled, truth = base + "profiled.sqlite.xz", base + "truth.json"
            with open(os.path.join(src, "truth.json")) as fh:
                ptruth = json.load(fh)
        world = rep["world_size"]
        rows = rep["repeats"]
        firsts = {r["variant"]: r["warmup_steps"] for r in reversed(rows)}
        later = [r["warmup_steps"] for r in rows[2:]] or [rows[0]["warmup_steps"]]
        launch = LAUNCH.format(world=world)
        ledger = {
            "rule": rule, "job": job, "change": change,
            "command_baseline": f"{launch} --rule {key} --variant baseline",
            "command_changed": f"{launch} --rule {key} --variant changed",
            "command_profiled": (NSYS.format(job=job) + f" {launch} {program_args(ptruth['command'])}"
                                 if job in home else None),
            "command_repeats": rep.get("command") or (
                f"{launch} --repeats {len(rows) // 2} --rules {','.join(ran)} --steps {len(rows[0]['step_ms'])} "
                f"--warmup {min(later)} --first-warmup {max(firsts.values())}"),
            "world_size": world, "gpu_name": rep["gpu_name"], "protocol": rep["protocol"],
            "profiled": profiled, "profiled_truth": truth,
            "profiled_truth_step_ms": ptruth["step_ms_per_rank"] if job in home else None,
            "repeats": [{k: r[k] for k in ("order", "variant", "warmup_steps", "step_ms", "step_ms_per_rank",
                                           "iter_ms_per_rank")} for r in rows],
            "step_ms_definition": STEP_MS,
            "baseline_config": rep["baseline_config"], "changed_config": rep["changed_config"],
            "extra_gemms_per_step": rep.get("extra_gemms_per_step"), "slow_rank": rep.get("slow_rank"),
            "torch_version": rep["torch_version"], "nccl_version": rep["nccl_version"], "date_utc": rep["date_utc"],
        }
        write_json(os.path.join(dest, "ledger.json"), ledger)
        made.append(folder)
    machine = os.path.join(a.runs, "machine.txt")
    shared = os.path.join(a.into, "machine.txt")
    if os.path.exists(machine):
        # The ledger's machine.txt describes the campaign its pairs came from; a later campaign that adds pairs
        # (a rule's second job) leaves it alone and puts its own machine beside each pair it made.
        with open(machine) as fh:
            text = fh.read()
        same = os.path.exists(shared) and open(shared).read() == text
        if not os.path.exists(shared) or same:
            shutil.copyfile(machine, shared)
        else:
            for folder in made:
                shutil.copyfile(machine, os.path.join(a.into, folder, "machine.txt"))
    print(f"wrote {len(made)} ledger folders under {a.into}: {', '.join(made)}")


if __name__ == "__main__":
    main()
