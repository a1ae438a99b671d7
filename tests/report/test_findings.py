"""Findings: generated from real (small) runs, every question present, numbers equal the analysis values,
and comparative words follow the data (swapping two runs flips them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ddp_profile.findings import build_findings, page_for, run_sets
from ddp_profile.findings import strategies as qa
from ddp_profile.findings.data import load_run
from ddp_profile.findings.text import compare, ms, pct, ranges_overlap

TRACES = Path(__file__).resolve().parents[2] / "traces"
SMALL = [
    "naive_small_fp32_2xh200",
    "flat_small_fp32_2xh200",
    "overlap_small_fp32_2xh200",
    "none_small_fp32_1xh200",
    "bucketed-10mb_small_fp32_2xh200",
    "torch_ddp-25mb_small_fp32_2xh200",
]
SCALING = ["bucketed-25mb_mlp8_fp32_1xh200", "bucketed-25mb_mlp8_fp32_2xh200"]

pytestmark = pytest.mark.skipif(not (TRACES / SMALL[0]).is_dir(), reason="committed traces not present")


@pytest.fixture(scope="module")
def small():
    runs = [load_run("main", TRACES / n) for n in SMALL]
    return run_sets(runs)["small"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces")
    for n in SMALL:
        shutil.copytree(TRACES / n, root / n)
    (root / "scaling").mkdir()
    for n in SCALING:
        shutil.copytree(TRACES / "scaling" / n, root / "scaling" / n)
    shutil.copy(TRACES / "machine.txt", root / "machine.txt")
    shutil.copy(
        Path(__file__).resolve().parents[1] / "data" / "findings_hosts.txt", root / "hosts.txt"
    )  # torch_ddp elsewhere
    out = tmp_path_factory.mktemp("out")
    sizes = build_findings(root, out)
    return out, sizes, root


def test_compare_words_follow_the_data():
    assert (
        compare(1.0, 2.0) == "faster" and compare(2.0, 1.0) == "slower" and compare(1.0, 1.0) == "as fast as"
    )
    assert compare(float("nan"), 1.0) == "n/a"
    assert ranges_overlap((1, 3), (2, 4)) and not ranges_overlap((1, 2), (3, 4))


def test_document_has_every_question_and_html(built):
    out, sizes, _ = built
    md = (out / "FINDINGS.md").read_text()
    for i in range(1, 9):
        assert f"\n## {i}. " in md, f"question {i} heading missing"
    html = (out / "findings.html").read_text()
    assert '<script src="plotly.min.js">' in html and (out / "plotly.min.js").stat().st_size > 1_000_000
    assert "fig-scaling" in html  # the scaling figure is embedded (scaling runs were given)
    assert "http://" not in html.replace("http://www.w3.org", "")  # nothing remote
    assert set(sizes) >= {"FINDINGS.md", "findings.html"}


def test_scaling_numbers_equal_the_analysis(built):
    out, _, _ = built
    md = (out / "FINDINGS.md").read_text()
    r2 = load_run("scaling", TRACES / "scaling" / SCALING[1])
    assert ms(r2.v("step_ns")) in md
    r1 = load_run("scaling", TRACES / "scaling" / SCALING[0])
    eff = 100 * r1.v("step_ns") / r2.v("step_ns")  # weak scaling: same work per GPU
    assert pct(eff) in md


def test_q1_numbers_are_the_analysis_values(small):
    s = qa.q1_naive(small, page_for, "machine")
    text = " ".join(s.paragraphs())
    n = small["naive"]
    assert ms(n.v("step_ns")) in text and ms(n.v("comm_ns")) in text and ms(n.host["grad_wait_ns"][0]) in text
    assert pct(n.v("comm_pct")) in text


def test_flat_vs_naive_word_flips_when_runs_swap(small):
    text = " ".join(qa.q2_flat(small, page_for, "m").paragraphs())
    swapped = dict(small, naive=small["flat"], flat=small["naive"])
    text2 = " ".join(qa.q2_flat(swapped, page_for, "m").paragraphs())
    word = compare(small["flat"].v("step_ns"), small["naive"].v("step_ns"))
    other = {"faster": "slower", "slower": "faster"}[word]
    assert f"Flat is {word} than naive" in text
    assert f"Flat is {other} than naive" in text2


def test_overlap_words_follow_step_times(small):
    text = " ".join(qa.q3_overlap(small, page_for, "m").paragraphs())
    ov, n = small["overlap"], small["naive"]
    assert f"The step is {compare(ov.v('step_ns'), n.v('step_ns'))} than naive" in text
    assert ms(ov.v("exposed_comm_ns")) in text


def test_torch_verdict_words_follow_the_ratios():
    import pandas as pd

    from ddp_profile.findings.reference import torch_verdict

    class Ref:
        def v(self, _):
            return 100e6

    faster = pd.DataFrame({"run": ["a", "b"], "÷ torch_ddp": ["0.900", "1.100"], "_ratio": [0.9, 1.1]})
    slower = pd.DataFrame({"run": ["a", "b"], "÷ torch_ddp": ["1.050", "1.100"], "_ratio": [1.05, 1.1]})
    t1, t2 = torch_verdict("S", faster, Ref()), torch_verdict("S", slower, Ref())
    assert "1 of 2 hand-written strategies are faster" in t1 and "fastest is a at 0.900×" in t1
    assert "closest" not in t1
    assert "no hand-written strategy is faster" in t2 and "closest is a at 1.050×" in t2
    # lower medians whose step ranges overlap torch_ddp's are not called faster
    close = pd.DataFrame(
        {
            "run": ["a", "b", "c"],
            "÷ torch_ddp": ["0.836", "0.879", "1.100"],
            "_ratio": [0.836, 0.879, 1.1],
            "_overlap": [False, True, True],
        }
    )
    t3 = torch_verdict("S", close, Ref())
    assert t3.startswith(
        "S: 2 of 3 hand-written strategies have a lower median step than torch_ddp's 100 ms "
        "(a, b); beyond the step ranges only a; the fastest is a at 0.836×"
    ), t3
    t4 = torch_verdict("S", close.assign(_overlap=True), Ref())
    assert "have a lower median step than" in t4 and "; none beyond the step ranges;" in t4
    assert "are faster" in torch_verdict("S", close.assign(_overlap=False), Ref())


def test_findings_and_sweep_page_state_one_fit(small):
    """q4 and the report's sweep page both use costmodel.sweep_fit over the same runs: same o, w and b*."""
    from ddp_profile.analysis.costmodel import fit_params
    from ddp_profile.findings.text import mb, num
    from ddp_profile.report import Group, Run
    from ddp_profile.report.sweep import pooled_fit

    fit = qa.shared_fit(small)
    o, w, _ = fit_params(fit)
    text = " ".join(qa.q4_buckets(small, page_for, "m", fit).paragraphs())
    assert f"o = {num(o / 1e3, 1)} µs, w = {num(w, 0)} GB/s" in text
    assert f"b* = √(s·w·o) = {mb(float(fit['b_star_bytes'].iloc[0]))}" in text
    runs = [Run(r.name, r.trace, r.analysis, dict(r.meta, bucket_mb=r.bucket_mb)) for r in small.values()]
    _, fit2, members = pooled_fit(
        Group("sweep", "t", [x for x in runs if x.meta.get("strategy") == "bucketed"]), runs
    )
    assert fit2.equals(fit) and len(members) == int(fit["n_runs"].iloc[0]) >= 2


def test_report_main_job_writes_findings(built, tmp_path):
    """`ddp-profile report <campaign>` writes the findings in its atomic swap; `--no-findings` and a
    non-campaign input skip them."""
    from ddp_profile.findings.pages import FindingsPages
    from ddp_profile.report import build_report

    root = built[2]
    out = tmp_path / "reports"
    sizes, failures = build_report([root], out, extras=[FindingsPages()])
    assert not failures and {"FINDINGS.md", "findings.html", "index.html"} <= set(sizes)
    assert (out / "FINDINGS.md").read_text().startswith("# Findings")
    assert "findings.html" in (out / "index.html").read_text()
    # the pages exist beside findings.html, so only the committed Markdown warns they may not
    html = (out / "findings.html").read_text()
    assert "not committed" in (out / "FINDINGS.md").read_text() and "not committed" not in html
    assert "HTML pages <code>ddp-profile report</code> wrote beside this page" in html and "`" not in html
    sizes, _ = build_report([root], out)  # no extras: the report alone
    assert "FINDINGS.md" not in sizes and not (out / "FINDINGS.md").exists()
    sizes, _ = build_report(
        [root / SMALL[0]], out, extras=[FindingsPages()]
    )  # one run folder: no campaign, no findings
    assert "FINDINGS.md" not in sizes


def test_real_runs_batch_and_hosts_come_from_the_files(built, small):
    """The intro's batch is the run JSONs' (4×128 for set small), and the hosts fixture (torch_ddp of set
    small on host-b) reaches question 5 and the limits."""
    out, _, _ = built
    md = (out / "FINDINGS.md").read_text()
    r = small["naive"]
    assert f"small = model small fp32, batch {r.config['batch']}×{r.config['seq_len']} per GPU" in md
    assert "from 2 hosts named in" in md
    assert "set small mixes hosts: torch_ddp on host-b, its other 5 runs on host-a" in md
    assert "torch_ddp ran on host-b, other runs of this set on host-a" in md
    hook = small["torch_ddp"].config.get("ddp_nvtx_hook")
    assert (
        "ran stock PyTorch DDP" if hook is False else "opt-in NVTX comm hook" if hook else "do not record"
    ) in md


def test_limits_state_whether_set_smalls_1gpu_run_is_launch_bound(launch_section, built, small):
    """The limits' launch sentence carries the launch section's numbers for the real set-small 1-GPU run."""
    from ddp_profile.nsys.api import load_api_calls

    md = (built[0] / "FINDINGS.md").read_text()
    trace = small["none"].trace
    sm = launch_section(trace, load_api_calls(trace)).summary()
    assert sm["launch_bound_steps"] == sm["n_steps"] >= 4  # this run is launch-bound in every step
    assert (
        f"set small's 1-GPU run is launch-bound in {sm['launch_bound_steps']} of {sm['n_steps']} steps (median "
        f"GPU idle {sm['idle_pct']:.1f} %, host {sm['host_us_per_launch']:.1f} µs per launch vs GPU "
        f"{sm['gpu_us_per_kernel']:.1f} µs per kernel)"
    ) in md


def test_bucket_caps_are_stated_in_mib_as_the_harness_sets_them(built, small):
    """--bucket-mb is MiB (harness/config.py multiplies by 2**20): labels, the q4 title and cap column, and
    q5's torch_ddp cap say MiB, from the run JSONs; run folder names (identifiers) keep their 'mb'."""
    import re

    from ddp_profile.findings import reference as qb
    from ddp_profile.findings.text import Table

    out, _, _ = built
    md = (out / "FINDINGS.md").read_text()
    assert small["bucketed-10"].label == "bucketed 10 MiB" and "| bucketed 10 MiB |" in md
    q4 = qa.q4_buckets(small, page_for, "m")
    assert q4.title == "4. Bucketed at 10 MiB"
    assert list(next(b.frame for b in q4.blocks if isinstance(b, Table))["cap"]) == ["10 MiB"]
    q5 = " ".join(qb.q5_torch([("Set small", small)], page_for, "m").paragraphs())
    assert "÷ torch_ddp (25 MiB buckets) step time" in q5
    html = (out / "findings.html").read_text()
    for text in (md, html, q4.title, " ".join(q4.paragraphs()), q5):
        assert not re.search(r"\d MB\b", text), re.search(r".{40}\d MB\b.{10}", text)


def test_findings_html_renders_inline_code_and_says_where_the_pages_are(built):
    """findings.html written without the report's pages says they are not in its folder, never 'not
    committed' (that is FINDINGS.md's note); Markdown inline code becomes <code>, escaped."""
    from ddp_profile.findings.render import html_text

    out, _, _ = built
    html, md = (out / "findings.html").read_text(), (out / "FINDINGS.md").read_text()
    assert "not committed" in md and "not committed" not in html
    assert (
        "per-run HTML pages that are not in this folder: <code>ddp-profile report</code> writes them" in html
    )
    assert (
        "Generated by <code>ddp-profile report</code>" in html and "Generated by `ddp-profile report`" in md
    )
    assert html_text("run `a <b>` now") == "run <code>a &lt;b&gt;</code> now"


def test_bucket_sweep_prose_writes_percentages_as_the_tables_do(small):
    """q4's 'every bucket size hides A %–B % of it' has the space before '%' that every other percentage of
    the findings has; no number is glued to its '%'."""
    import re

    text = " ".join(qa.q4_buckets(small, page_for, "m").paragraphs())
    assert re.search(r"every bucket size hides \d+ %–\d+ % of it", text), text
    assert not re.search(r"\d%", text), re.search(r".{30}\d%", text)
