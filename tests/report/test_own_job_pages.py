"""Run pages of committed traces read as a user reads them: the answer first, and no rows that say nothing."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from ddp_profile import report
from ddp_profile.findings.pages import FindingsPages

pytest.importorskip("plotly")
TRACES = Path(__file__).resolve().parents[2] / "traces"


def _page(path: Path) -> str:
    runs, failures = report.load_runs([path], progress=io.StringIO())
    assert not failures and len(runs) == 1
    return report.render_run_page(runs[0])


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_gpt_accum_page_names_the_straggler_and_its_fix_before_any_measurement():
    """gpt-accum (truth.json: rank 0 calls loss.item() every iteration): the verdict box opens with the
    straggler, rank 0, its host cause and what to change; the step and communication numbers follow."""
    page = _page(TRACES / "foreign" / "gpt-accum")
    box = _text(page.split("<div class='verdict'>", 1)[1].split("</div>", 1)[0]).strip()
    assert box.startswith("The step is bound by a straggler, rank 0 (removable ")
    first = box.split("Median step", 1)[0]
    assert "what to change: rank 0's host falls behind" in first and "cause host" in first
    # ranks differ > 2x in communication: each rank's value, not a pooled median
    assert re.search(
        r"Communication takes rank 0 [\d.]+ ms, rank 1 [\d.]+ ms per step \(ranks differ > 2×\)", box
    )
    # no NVTX in this program: the Perfetto link says its phases are inferred, as the export labels them
    assert "phases per rank, inferred;" in page and "NVTX phases per rank" not in page
    head = page.split("Headline: medians over ", 1)[1].split("</table>", 1)[0]
    assert "inside the step (inferred from the kernel sequence: no step NVTX ranges)" in head
    assert "step's NVTX range" not in head


def test_gpt_logevery_verdict_divides_the_step_span_the_page_defines():
    """gpt-logevery (steps inferred, no NVTX): the verdict's share divides the critical-path step span, so
    it says "step span", shows the number the critical-path table's median gives, and the headline has a
    step span row beside the GPU-window step time, each defined against the other."""
    runs, failures = report.load_runs([TRACES / "foreign" / "gpt-logevery"], progress=io.StringIO())
    assert not failures
    page = report.render_run_page(runs[0])
    box = _text(page.split("<div class='verdict'>", 1)[1].split("</div>", 1)[0])
    span = runs[0].analysis.critical_path["span_ns"].median()
    from ddp_profile.fmt import fmt_ms

    assert f"of the {fmt_ms(span)} critical-path step span" in box
    cp = _text(page.split("<h2>Critical path</h2>", 1)[1].split("</p>", 1)[0])
    assert f"The verdict's shares divide this table's median step span, {fmt_ms(span)};" in cp
    # the launch section compares its host range with the GPU window the way round the medians are
    launch = _text(page.split("<h2>Is the step launch-bound?</h2>", 1)[1].split("</p>", 1)[0])
    host, window = runs[0].launches.steps["step_ns"].median(), runs[0].analysis.steps["step_ns"].median()
    assert f"(median {fmt_ms(host)}): " in launch and f"(median {fmt_ms(window)})" in launch
    assert ("shorter than the GPU window" in launch) == (window > host), launch
    assert ("it is longer than the GPU window" in launch) == (window <= host), launch
    head = page.split("Headline: medians over ", 1)[1].split("</table>", 1)[0]
    assert "step time (ms)" in head and "step span (ms)" in head
    assert "the step span adds the GPU idle before it" in head and "the critical path divides it" in head


def test_contention_and_overlap_tables_name_their_samples_apart():
    """gpt-logevery: the contention table counts only kernels seen both alone and under NCCL, while its last
    column sums every instance under NCCL, and the per-name overlap
    table's column is time beside the other class (an NCCL kernel's is time beside compute): the labels
    say so instead of 'n overlapped' beside 'time under NCCL' and 'comm hidden (%)' on compute kernels."""
    page = _page(TRACES / "foreign" / "gpt-logevery")
    cont = page.split("Contention: compute kernels slowed", 1)[1].split("</thead>", 1)[0]
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", cont)
    assert heads[1:3] == ["counted alone", "counted under NCCL"] and heads[-1] == "all time under NCCL (ms)"
    over = page.split("Overlap per kernel name", 1)[1].split("</thead>", 1)[0]
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", over)
    assert heads[-2:] == ["beside the other class (ms)", "beside the other class (%)"], heads
    assert "comm hidden" not in over and "time under NCCL" not in over


def test_one_gpu_headline_has_no_rows_of_communication_zeros():
    page = _page(TRACES / "none_xl_fp32_1xh200")
    head = page.split("Headline: medians over ", 1)[1].split("</table>", 1)[0]
    assert head.startswith("1 rank × ")
    assert "step time (ms)" in head and "step span (ms)" in head and "compute (ms)" in head
    assert "comm tail (ms)" not in head and "exposed wait (ms)" not in head


def test_index_says_what_bounds_each_run_and_long_kernel_names_may_wrap(tmp_path):
    runs, failures = report.load_runs([TRACES / "foreign" / "gpt-accum"], progress=io.StringIO())
    assert not failures
    report.write_report(runs, tmp_path / "out", progress=io.StringIO())
    index = (tmp_path / "out" / "index.html").read_text()
    row = _text(index.split("href='run-gpt-accum.html'>", 1)[1].split("</tr>", 1)[0])
    assert re.match(r"gpt-accum a straggler, rank 0 \([\d.]+ ms removable\)", row.strip()), row
    page = (tmp_path / "out" / runs[0].page).read_text()
    # the contention table's 130-character cuBLAS name may wrap; short names (Kernel2) are cells like any other
    assert re.search(r"<td class='long'>sm90_xmma_gemm_\w{60,}</td>", page)
    assert "<td class='long'>Kernel2</td>" not in page and "<td>Kernel2</td>" in page


def test_one_run_folder_report_says_why_there_are_no_findings(tmp_path):
    out = io.StringIO()
    report.build_report(
        [str(TRACES / "naive_xl_fp32_2xh200")], tmp_path / "out", progress=out, extras=[FindingsPages()]
    )
    assert "naive_xl_fp32_2xh200 is one run (FINDINGS.md answers from a campaign folder" in out.getvalue()
    assert "none of the loaded runs is a run folder" not in out.getvalue()


def test_a_harness_run_alone_says_what_to_change_without_a_no_comparison_sentence():
    """fsdp_xl alone: the analysis says what to change, so "No comparison holds this run" adds nothing."""
    page = _page(TRACES / "campaign" / "A" / "fsdp_xl_fp32_2xh200")
    box = _text(page.split("<div class='verdict'>", 1)[1].split("</div>", 1)[0])
    assert "what to change: " in box and "No comparison holds this run" not in box


def test_host_straggler_own_job_headline_names_the_rank_and_the_page_has_no_harness_wording():
    """The what-if host straggler (rank 3's host falls behind): the verdict's first sentence names rank 3
    although the bound is the host; an own job (no run JSON) gets no run-JSON or bucket wording."""
    page = _page(TRACES / "whatif" / "straggler-host--gpt2-ddp-slowhost")
    box = _text(page.split("<div class='verdict'>", 1)[1].split("</div>", 1)[0]).strip()
    assert box.startswith(
        "The step is bound by the host (GPU idle awaiting launches), with rank 3 the straggler"
    )
    text = _text(page)
    assert "run JSON" not in text and "Collectives by bucket" not in text
    assert "Collectives by kind and size (medians)" in text
