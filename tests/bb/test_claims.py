"""The machinery of the authors' claims R10, R19–R22 (spec extreme-tokens §14): the parallel block, the subspace
measure, `bb subspace` and its bad inputs, the verdict functions on constructed and tiny run folders."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.bb.config import TrainConfig, resolve_config, train_hash
from attnlab.bb.principal_subspaces import energy_inside, energy_rank, principal_angles, subspace_measure, top_subspace
from attnlab.bb.repro import verdicts as claims
from attnlab.cli import main
from attnlab.runs import config_hash, to_jsonable
from attnlab.toy.model import ToyConfig, ToyTransformer
from attnlab.tracing.adapters.toy import toy_hooks
from attnlab.tracing.interventions import ZeroHead, ZeroMLP
from tests.numerics import assert_close

TINY = ["--d-model", "16", "--d-mlp", "32", "--seq-len", "16", "--batch", "8", "--eval-batch", "16", "--threads", "1"]


def _models(**kw) -> tuple[ToyTransformer, ToyTransformer]:
    """A parallel model and a sequential one with the same weights (its LN₂ a copy of LN₁)."""
    cfg = dict(vocab=10, d_model=16, n_heads=2, d_mlp=32, max_len=8, **kw)
    torch.manual_seed(0)
    par = ToyTransformer(ToyConfig(block="parallel", **cfg))
    seq = ToyTransformer(ToyConfig(**cfg))
    state = par.state_dict()
    for l in range(par.cfg.n_layers):
        for t in ("weight", "bias"):
            state[f"blocks.{l}.ln2.{t}"] = state[f"blocks.{l}.ln1.{t}"]
    seq.load_state_dict(state)
    return par, seq


def test_parallel_block_forward_is_attention_plus_mlp_of_one_norm():
    par, seq = _models()
    tokens = torch.randint(0, 10, (3, 8), generator=torch.Generator().manual_seed(1))
    b = par.blocks[0]
    assert b.ln2 is None and b.ln1 is not None
    with torch.no_grad():
        x = par.embed(tokens) + par.pos.weight[:8]
        h = b.ln1(x)
        expect = par.unembed(par.ln_f(x + b.attn(h) + b.mlp(h)))
        torch.testing.assert_close(par(tokens), expect)
        # the sequential block with the same weights differs: its MLP reads LN(x + Attn(LN x))
        seq_expect = seq.unembed(seq.ln_f(x + b.attn(h) + b.mlp(b.ln1(x + b.attn(h)))))
        torch.testing.assert_close(seq(tokens), seq_expect)
        assert (par(tokens) - seq(tokens)).abs().max() > 1e-2


def test_interventions_on_the_parallel_block():
    par, _ = _models()
    tokens = torch.randint(0, 10, (2, 8), generator=torch.Generator().manual_seed(2))
    b = par.blocks[0]
    with torch.no_grad():
        x = par.embed(tokens) + par.pos.weight[:8]
        h = b.ln1(x)
        with par.hooks(toy_hooks(par, [ZeroMLP(0)])):
            torch.testing.assert_close(par(tokens), par.unembed(par.ln_f(x + b.attn(h))))
        # zeroing head 1 leaves head 0's W_O share and the whole MLP term
        q, k, v = b.attn.qkv(h).view(2, 8, 3, 2, 8).unbind(2)
        z = b.attn._explicit(q, k, v)
        z[:, :, 1] = 0
        attn0 = b.attn.o(z.reshape(2, 8, 16))
        with par.hooks(toy_hooks(par, [ZeroHead(0, 1)])):
            torch.testing.assert_close(par(tokens), par.unembed(par.ln_f(x + attn0 + b.mlp(h))))


def test_parallel_block_without_attention_or_mlp():
    torch.manual_seed(3)
    m = ToyTransformer(ToyConfig(vocab=10, d_model=16, d_mlp=32, max_len=8, n_layers=2, no_attn=[0], block="parallel"))
    assert m.blocks[0].ln1 is not None and m.blocks[0].attn is None
    tokens = torch.randint(0, 10, (2, 8))
    with torch.no_grad():
        x = m.embed(tokens) + m.pos.weight[:8]
        x1 = x + m.blocks[0].mlp(m.blocks[0].ln1(x))
        torch.testing.assert_close(m.blocks[0](x), x1)


def _basis(d: int, rows: list[np.ndarray], n: int, seed: int) -> np.ndarray:
    """n random combinations [n,d] of the given directions (full rank in their span)."""
    coef = np.random.default_rng(seed).standard_normal((n, len(rows)))
    return coef @ np.stack(rows)


@pytest.mark.numerics
def test_subspace_measure_on_known_angles():
    d, theta = 12, np.deg2rad(30.0)
    e = np.eye(d)
    a = _basis(d, [e[0], e[1]], 200, 0)
    m = _basis(d, [np.cos(theta) * e[0] + np.sin(theta) * e[2], e[3], e[4]], 200, 1)
    r = subspace_measure(a, m, energy=0.999999)
    assert (r["k_attn"], r["k_mlp"]) == (2, 3)
    # float64 SVDs of exact spans (matrix worst 0)
    assert_close(r["angles_deg"], [30.0, 90.0], atol=1e-3, label="principal angles", kind="observed")
    # energy of a inside span(m): cos²30° of the e0 component, none of e1
    expect = (a[:, 0] ** 2).sum() * np.cos(theta) ** 2 / (a**2).sum()
    # (matrix worst 1.7e-16, 2.2e+06x inside)
    assert_close(r["energy_attn_in_mlp"], expect, rtol=1e-9, label="energy inside", kind="observed")
    assert r["random_baseline_attn_in_mlp"] == pytest.approx(3 / 12)
    # orthogonal spans: every angle 90°, no energy inside
    r2 = subspace_measure(_basis(d, [e[0]], 50, 2), _basis(d, [e[5], e[6]], 50, 3))
    assert r2["angles_deg"] == [90.0]
    assert_close(r2["energy_attn_in_mlp"], 0.0, atol=1e-20, label="energy of orthogonal spans", kind="observed")


@pytest.mark.numerics
def test_energy_rank_and_basis():
    d = 6
    # singular values 10, 3, 1 along e0..e2: energies 100 / 109 / 110
    x = np.zeros((3, d))
    x[0, 0], x[1, 1], x[2, 2] = 10.0, 3.0, 1.0
    assert energy_rank(x, 0.9) == 1 and energy_rank(x, 0.95) == 2 and energy_rank(x, 0.995) == 3
    assert energy_rank(np.zeros((4, d))) == 0
    u = top_subspace(x, 0.95)
    # an SVD's basis (matrix worst 0)
    assert_close(np.abs(u.T @ u), np.eye(2), atol=1e-12, label="top subspace orthonormal", kind="observed")
    assert_close(energy_inside(x, u), 109 / 110, rtol=1e-6, label="energy 109/110", kind="observed")
    assert principal_angles(u, np.zeros((d, 0))).size == 0


def test_block_field_keeps_old_hashes_and_json():
    cfg = resolve_config("cpu")
    # values from before the field existed (commit e309cb6)
    assert (train_hash(cfg), config_hash(cfg)) == ("ba4d9b99cf30fed1", "dd4394aed5ee212a")
    assert "block" not in to_jsonable(cfg) and "block" not in cfg.to_dict()
    par = resolve_config("cpu", block="parallel")
    assert to_jsonable(par)["block"] == "parallel" and train_hash(par) != train_hash(cfg)
    assert "block" not in ToyConfig().to_dict() and ToyConfig(block="parallel").to_dict()["block"] == "parallel"


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "error:" in line]


def _state(folder: Path) -> dict:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Tiny finished runs of the variants 1 layer (sequential, parallel) and 3 layers."""
    root = tmp_path_factory.mktemp("claims")
    for name, extra in (("seq", []), ("par", ["--block", "parallel"]), ("three", ["--layers", "3"])):
        assert main(["bb", "train", "--steps", "4", *TINY, *extra, "--out", str(root / name)]) == 0
    return root


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--energy", "0"], "energy must be in (0, 1], got 0"),
        (["--energy", "nan"], "energy"),
        (["--layer", "3"], "--layer 3 is out of range"),
        (["--layer", "-1"], "layer"),
    ],
)
def test_subspace_bad_inputs_are_one_line(runs, tmp_path, capsys, extra, message):
    before = _state(runs)
    assert main(["bb", "subspace", str(runs / "seq"), *extra, "--out", str(tmp_path / "s")]) == 1
    err = _errors(capsys)
    assert len(err) == 1 and message in err[0], err
    assert _state(runs) == before and not (tmp_path / "s").exists()


def test_subspace_refuses_out_inside_the_run_and_a_bad_block(runs, capsys):
    before = _state(runs)
    assert main(["bb", "subspace", str(runs / "seq"), "--out", str(runs / "seq" / "sub")]) == 1
    assert "is inside the training run" in _errors(capsys)[0]
    with pytest.raises(SystemExit):
        main(["bb", "train", "--block", "paralel", "--out", str(runs / "x")])
    assert "invalid choice: 'paralel'" in capsys.readouterr().err
    with pytest.raises(Exception, match="unknown block 'diagonal'; valid: sequential, parallel"):
        TrainConfig(block="diagonal")
    assert _state(runs) == before


def test_subspace_command_writes_its_folder(runs, tmp_path, capsys):
    out = tmp_path / "sub"
    assert main(["bb", "subspace", str(runs / "par"), "--out", str(out), "--threads", "1"]) == 0
    m = json.loads((out / "subspace.json").read_text())
    assert m["block"] == "parallel" and m["n_vectors"] == 16 * 16 and m["d_model"] == 16
    assert m == {**m, **{k: v for k, v in claims.subspace_of_run(runs / "par").items() if k != "angles_deg"}}
    assert (out / "figures" / "subspace.png").exists() and (out / "report.html").exists()
    assert "attention energy in MLP subspace" in capsys.readouterr().out


def test_verdicts_on_tiny_runs(runs):
    number, met, why = claims.verdict_R19(runs)
    assert 0 <= number <= 1 and "attention energy in the MLP subspace" in why and isinstance(met, bool)
    n = claims.r21_numbers(runs)
    assert n["3 layers"]["peak_ratio_0"] != n["3 layers, MLP 0 zeroed"]["peak_ratio_0"]
    number, met, why = claims.verdict_R21(runs)
    assert number == pytest.approx(n["3 layers"]["attn_sink"] - n["1 layer"]["attn_sink"])
    assert np.isfinite(claims.verdict_R10(runs)[0])
    number, met, why = claims.verdict_R20(runs)
    assert np.isnan(number) and not met and "attn + attn (no MLP)" in why


def _fake_run(folder: Path, cfg: TrainConfig, records: list[dict], trial: dict | None = None) -> None:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(to_jsonable(cfg)))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "train_summary.json").write_text("{}")
    if trial is not None:
        (folder / "trial.json").write_text(json.dumps(trial))


def _rec(step, bos, others, loss=1.0, sink=0.5):
    per_layer = (lambda v: [v] * len(bos)) if isinstance(bos, list) else (lambda v: v)
    return {
        "step": step,
        "resid_norm_bos": bos,
        "resid_norm_others": others,
        "attn_sink": sink,
        "value_norm_bos": per_layer(1.0),
        "value_norm_others": per_layer(2.0),
        "loss": loss,
        "excess_risk_backcopy": 0.1,
        "excess_risk_bigram": 0.2,
    }


def test_variant_table_and_r20_on_constructed_runs(tmp_path):
    layouts = {
        "a": (dict(n_layers=1), [_rec(0, 10.0, 10.0)]),
        "b": (dict(n_layers=2, no_mlp=(0, 1)), [_rec(0, [10.0, 12.0], [10.0, 10.0], sink=[0.1, 0.9])]),
        "c": (dict(n_layers=2, no_attn=(0,)), [_rec(0, [14.0, 12.0], [10.0, 10.0], sink=[None, 0.9])]),
        "d": (dict(n_layers=2, no_mlp=(0,)), [_rec(0, [10.0, 12.0], [10.0, 10.0], sink=[0.2, 0.8])]),
        "e": (dict(n_layers=3), [_rec(0, [30.0, 12.0, 10.0], [10.0, 10.0, 10.0], sink=[0.1, 0.9, 0.5])]),
    }
    for name, (kw, recs) in layouts.items():
        _fake_run(tmp_path / name, TrainConfig(d_model=16, d_mlp=32, **kw), recs)
    rows = {r["variant"]: r for r in claims.variant_table(tmp_path)}
    assert rows["3 layers"]["peak_ratio_by_layer"] == [3.0, 1.2, 1.0] and rows["3 layers"]["sink_layer"] == 1
    assert rows["MLP + attn + MLP"]["sink_layer"] == 1 and rows["MLP + attn + MLP"]["peak_ratio_max"] == 1.4
    number, met, why = claims.verdict_R20(tmp_path)
    assert number == 3.0 and met, why
    from attnlab.bb.figures import variant_figure

    assert variant_figure(list(rows.values()), tmp_path / "v.png").stat().st_size > 1000
    _fake_run(tmp_path / "f", TrainConfig(d_model=16, d_mlp=32, n_layers=2, no_mlp=(0,)), [_rec(0, [1, 1], [1, 1])])
    number, met, why = claims.verdict_R20(tmp_path)  # the first run of a layout counts ("d" before "f")
    assert met


def test_stability_table_and_r22_on_constructed_runs(tmp_path):
    for attention in ("softmax", "relu"):
        for lr in (1e-3, 3e-3, 1e-2, 3e-2):
            for seed in range(3):
                cfg = TrainConfig(d_model=16, d_mlp=32, attention=attention, lr=lr, seed=seed)
                folder = tmp_path / "trials" / f"{attention}-{lr}-{seed}"
                if attention == "softmax" and lr == 3e-2 and seed < 2:  # two blow-ups
                    trial = {"status": "failed", "error": "NumericalError: non-finite value in the loss"}
                    _fake_run(folder, cfg, [_rec(0, 1.0, 1.0, loss=4.0)], trial)
                elif attention == "relu" and lr == 3e-2 and seed == 0:  # one that went nowhere
                    _fake_run(folder, cfg, [_rec(0, 1, 1, loss=4.0), _rec(9, 1, 1, loss=4.2)], {"status": "done"})
                else:
                    _fake_run(folder, cfg, [_rec(0, 1, 1, loss=4.0), _rec(9, 1, 1, loss=2.0)], {"status": "done"})
    table = {(r["attention"], r["lr"]): r for r in claims.stability_table(tmp_path)}
    assert table[("softmax", 3e-2)]["diverged"] == 2 and table[("relu", 3e-2)]["diverged"] == 1
    assert table[("relu", 1e-3)]["diverged"] == 0 and table[("relu", 1e-3)]["mean_excess_risk_bigram"] == pytest.approx(
        0.2
    )
    number, met, why = claims.verdict_R22(tmp_path)
    assert number == -1.0 and met and "softmax 2/12, ReLU 1/12" in why and "stabler: ReLU" in why
    assert set(claims.VERDICTS) == {"R10", "R19", "R20", "R21", "R22"}


def test_committed_sweep_specs_build_the_claimed_trials():
    from attnlab.sweep.config import load_spec
    from attnlab.sweep.plan import build_trials

    root = Path(__file__).resolve().parents[2] / "docs" / "specs"
    trials = build_trials(load_spec(root / "bb-layer-variants.toml"))
    assert [claims.variant_of(t.config) for t in trials] == [label for label, _ in claims.VARIANTS]
    assert {(t.config.steps, t.config.seed) for t in trials} == {(500, 0)}
    grid = build_trials(load_spec(root / "bb-softmax-relu-stability.toml"))
    cells = {(t.config.attention, t.config.lr, t.config.seed) for t in grid}
    assert len(grid) == len(cells) == 24 and {a for a, _, _ in cells} == {"softmax", "relu"}


@pytest.mark.numerics
def test_attention_sink_is_recorded_when_layer_0_has_no_attention():
    from attnlab.tracing.adapters.toy import trace_toy

    torch.manual_seed(4)
    m = ToyTransformer(ToyConfig(vocab=10, d_model=16, d_mlp=32, max_len=8, n_layers=2, no_attn=[0]))
    tokens = torch.randint(0, 10, (3, 8), generator=torch.Generator().manual_seed(5))
    got = {}
    with torch.no_grad(), m.hooks({"blocks.1.attn.hook_pattern": lambda x, n: got.setdefault("A", x.clone())}):
        trace, _ = trace_toy(m, tokens, 10)
    mean_key0 = trace.attn_key0_over_tokens(range(10))[1, 0]
    # a float64 mean of the same float32 weights in another order (matrix worst 0)
    assert_close(mean_key0, float(got["A"][:, 0, :, 0].double().mean()), rtol=1e-9, label="key-0 mean",
                 kind="observed")  # fmt: skip
    d = trace.dlogit_by_token[1][0]
    assert np.isfinite(d[trace.dlogit_count > 0]).all() and trace.dlogit_count.sum() == 3 * 6


def test_subspace_refuses_a_layer_without_mlp_and_verdicts_a_missing_folder(runs, tmp_path, capsys):
    run = tmp_path / "nomlp"
    assert main(["bb", "train", "--steps", "2", *TINY, "--layers", "2", "--no-mlp", "1", "--out", str(run)]) == 0
    capsys.readouterr()
    before = _state(run)
    assert main(["bb", "subspace", str(run), "--layer", "1", "--out", str(tmp_path / "s")]) == 1
    err = _errors(capsys)
    assert len(err) == 1 and "--layer 1 of" in err[0] and "lacks attention or an MLP" in err[0]
    assert _state(run) == before and not (tmp_path / "s").exists()
    with pytest.raises(Exception, match="is not a folder; expected a folder of `bb train` runs"):
        claims.verdict_R20(tmp_path / "nowhere")
    assert "missing finished runs" in claims.verdict_R19(tmp_path)[2]
