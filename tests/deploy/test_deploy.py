"""`attnlab deploy` (R23): the quantiser's closed form, the window mask's properties on tiny random Llamas, both
commands end to end on a tiny local model folder, the verdict, and one-line errors for bad input."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.cli import main
from attnlab.deploy._quant import OutlierLog, QuantSpec, fake_quant, outlier_channels, quant_hooks
from attnlab.deploy._window import masked_logits, visible
from attnlab.tracing.adapters.arch import get_arch
from attnlab.tracing.adapters.hf import traced
from tests.real.conftest import save_tiny_hf_folder, tiny_llama


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return save_tiny_hf_folder(tmp_path_factory.mktemp("tiny-llama"), "llama")


def _with_outlier() -> torch.Tensor:
    """x [2,16,8]: N(0,1) with channel 3 of window 0 and channel 5 of window 1 made massive (±500)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 16, 8, generator=g)
    x[0, 4, 3], x[1, 0, 5] = 500.0, -500.0
    return x


def test_naive_round_trip_error_is_at_most_half_a_step():
    x = _with_outlier()
    q = fake_quant(x, 8)
    scale = x.abs().amax(dim=(1, 2), keepdim=True) / 127
    assert torch.all((q - x).abs() <= scale / 2 + 1e-6)
    assert torch.allclose(torch.round(q / scale), q / scale, atol=1e-4)  # on the grid
    # the massive entry sets the step (500/127): entries below half a step become 0, almost all of them here
    assert (q[x.abs() < scale.expand_as(x) / 2] == 0).all() and (q == 0).float().mean() > 0.9


def test_excluded_outliers_stay_exact_and_clipped_ones_are_clamped():
    x = _with_outlier()
    mask, ratio = outlier_channels(x, ratio=10.0, max_outliers=4)
    assert mask.nonzero().tolist() == [[0, 3], [1, 5]]
    assert ratio[0, 3] > 10 and ratio[1, 5] > 10
    rest = x.abs().masked_fill(mask[:, None, :], 0).amax(dim=(1, 2), keepdim=True) / 127
    kept = fake_quant(x, 8, mask, keep=True)
    assert torch.equal(kept[0, :, 3], x[0, :, 3]) and torch.equal(kept[1, :, 5], x[1, :, 5])
    other = ~mask[:, None, :].expand_as(x)
    assert torch.all((kept - x).abs()[other] <= rest.expand_as(x)[other] / 2 + 1e-6)
    clipped = fake_quant(x, 8, mask, keep=False)
    assert torch.allclose(clipped[0, 4, 3], 127 * rest[0, 0, 0]) and torch.allclose(
        clipped[1, 0, 5], -127 * rest[1, 0, 0]
    )
    assert torch.equal(clipped[other], kept[other])
    # at most max_outliers channels, largest peaks first; none when nothing exceeds the ratio
    assert outlier_channels(x, 10.0, 1)[0].sum() == 2
    assert not outlier_channels(torch.ones(1, 4, 6), 10.0, 4)[0].any()


@pytest.mark.parametrize("site", ["linear", "residual"])
def test_quant_hooks_leave_no_hooks_and_16_bits_is_nearly_exact(site):
    model = tiny_llama()
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    arch = get_arch(model)
    with torch.no_grad():
        ref = model(ids).logits
        with traced(model, hooks=quant_hooks(arch, QuantSpec("naive", site, bits=16), OutlierLog())) as sess:
            fine = sess.forward(ids)
        with traced(model, hooks=quant_hooks(arch, QuantSpec("naive", site, bits=2), OutlierLog())) as sess:
            coarse = sess.forward(ids)
        again = model(ids).logits
    assert torch.equal(again, ref)
    assert all(not m._forward_pre_hooks for m in model.modules())
    assert (fine - ref).abs().max() < 1e-3 < (coarse - ref).abs().max()


def test_linear_site_quantises_a_shared_input_once_under_its_first_layer():
    """q/k/v read one normed tensor: it is quantised once and its outliers are logged under q_proj alone."""
    model = tiny_llama()
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(4))
    log = OutlierLog()
    hooks = quant_hooks(get_arch(model), QuantSpec("exclude", "linear", ratio=1.0, max_outliers=2), log)
    assert "blocks.0.self_attn.k_proj.hook_in" in hooks and "blocks.1.mlp.down_proj.hook_in" in hooks
    with traced(model, hooks=hooks) as sess:
        sess.forward(ids)
    modules = {m for _, m in log.found}
    assert {"self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj"} == modules


def test_window_mask_visibility():
    m = visible(10, 3, sink_tokens=1)
    assert m[9].nonzero().flatten().tolist() == [0, 7, 8, 9]
    assert visible(10, 3)[9].nonzero().flatten().tolist() == [7, 8, 9]
    assert torch.equal(visible(10, 10), torch.ones(10, 10, dtype=torch.bool).tril())
    assert torch.equal(visible(10, None), visible(10, 10))


def test_window_at_least_t_is_full_attention():
    model = tiny_llama()
    ids = torch.randint(0, 64, (2, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(ids).logits
    for w, sinks in ((None, 0), (20, 0), (20, 1)):
        assert torch.allclose(masked_logits(model, ids, w, sinks), ref, atol=1e-5, rtol=0)
    assert not torch.allclose(masked_logits(model, ids, 4, 0), ref, atol=1e-3)


@pytest.mark.parametrize("layers", [1, 2])
def test_window_logits_ignore_tokens_outside_the_receptive_field(layers):
    """One layer: position i depends on tokens i−w+1..i (and 0 with the sink) only. L layers: the window's reach
    stacks to i − L(w−1); a token just beyond one window still matters when L > 1."""
    model, w, T = tiny_llama(layers=layers), 4, 24
    ids = torch.randint(3, 64, (1, T), generator=torch.Generator().manual_seed(3))
    i, reach = T - 1, layers * (w - 1)
    changed = ids.clone()
    changed[0, 1 : i - reach] = 1  # every token before the receptive field, except token 0
    only0 = ids.clone()
    only0[0, 0] = 1
    for sinks in (0, 1):
        a, b = masked_logits(model, ids, w, sinks), masked_logits(model, changed, w, sinks)
        assert torch.equal(a[0, i], b[0, i])
        assert torch.equal(a[0, i], masked_logits(model, only0, w, sinks)[0, i]) == (sinks == 0)
    if layers > 1:
        beyond_one = ids.clone()
        beyond_one[0, i - w] = 1
        assert not torch.equal(masked_logits(model, ids, w, 0)[0, i], masked_logits(model, beyond_one, w, 0)[0, i])


def test_cli_runs_and_verdict(llama_dir, tmp_path, capsys):
    from attnlab.real.repro.verdicts import verdict_R23

    base = ["--model", str(llama_dir), "--tokens", "32", "--samples", "2"]
    q, w = tmp_path / "q", tmp_path / "w"
    assert main(["deploy", "quantize", *base, "--out", str(q)]) == 0
    assert main(["deploy", "window", *base, "--window", "8", "--out", str(w)]) == 0
    assert f"run folder: {w}" in capsys.readouterr().out
    for name in (
        "perplexity.csv",
        "samples.csv",
        "outliers.csv",
        "summary.json",
        "report.html",
        "figures/perplexity.png",
    ):
        assert (q / name).is_file(), name
    for name in ("perplexity.csv", "nll/prose/full.npy", "nll/code/sink-window-8.npy", "figures/nll_by_position.png"):
        assert (w / name).is_file(), name
    assert json.loads((q / "manifest.json").read_text())["command"] == "deploy quantize"
    v = verdict_R23(q, w)
    assert set(v) == {"quant", "window", "met", "why"} and isinstance(v["met"], bool)
    assert set(v["quant"]["domains"]) == {"prose", "code"} and v["window"]["window"] == 8
    r = v["quant"]["domains"]["prose"]
    assert r["ratio"] == pytest.approx(r["naive"] / r["exclude"])
    # the reproduce row R23 computes its numbers from these two folders, and its checks agree with the verdict
    from attnlab.real.repro import measures as real_rows
    from attnlab.reproduce.targets import TARGETS
    from attnlab.reproduce.verdict import MET, MISSED, verdict

    row = next(t for t in TARGETS if t.id == "R23")
    numbers = real_rows.r_r23({"real_quant": q, "real_window": w})
    assert numbers["claims_met"] == float(v["met"])
    assert numbers["quant_ratio_min"] == min(d["ratio"] for d in v["quant"]["domains"].values())
    assert verdict(row.checks, numbers)[0] == (MET if v["met"] else MISSED)


def test_reports_are_written_from_the_run_folder_alone(llama_dir, tmp_path):
    """write_report(run) rewrites each command's page from a copy of its folder, byte for byte (issue 20), and
    refuses a run of another command in one line."""
    import shutil

    from attnlab.deploy.report import write_report
    from attnlab.errors import InputError
    from attnlab.runs import RunDir

    base = ["--model", str(llama_dir), "--tokens", "32", "--samples", "2"]
    for command, extra in (("quantize", []), ("window", ["--window", "8"])):
        out = tmp_path / "runs" / command
        assert main(["deploy", command, *base, *extra, "--out", str(out)]) == 0
        copy = tmp_path / "copy" / "runs" / command
        shutil.copytree(out, copy)
        (copy / "report.html").unlink()
        write_report(RunDir(copy))
        assert (copy / "report.html").read_bytes() == (out / "report.html").read_bytes(), command
    manifest = copy / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"deploy window"', '"scan"'))
    with pytest.raises(InputError, match="not of a deploy command"):
        write_report(RunDir(copy))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["window", "--window", "0"], "window must be an integer >= 1"),
        (["window", "--window", "40"], "window 40 is longer than --tokens 32"),
        (["window", "--tokens", "100", "--window", "8"], "longer than the model's context"),
        (["quantize", "--tokens", "100"], "longer than the model's context"),
        (["quantize", "--bits", "1"], "bits must be an integer in [2, 16]"),
    ],
)
def test_bad_input_is_one_line(llama_dir, tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    rc = main(["deploy", argv[0], "--model", str(llama_dir), "--tokens", "32", *argv[1:], "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and message in err and len(err.splitlines()) == 1, err
    assert not out.exists()
