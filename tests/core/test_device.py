"""Issue 22 on the CPU: the `device` field of every computing command, its one-line refusals (no CUDA, a command
that computes on the cpu only, a size over the GPU's memory), the manifest record, the sweep's GPU reservation,
the phase diagram's GPU loop agreeing with the CPU loop (run here on the CPU), and, on torch's `meta` device, that
each command's hot loop makes its tensors on the device it is given."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnlab.cli import build_parser, main
from attnlab.core import device as D
from attnlab.errors import InputError
from attnlab.runs import budget

COMMANDS = [
    ["bb", "train"],
    ["bb", "intervene", "RUN"],
    ["series", "train"],
    ["consensus", "simulate"],
    ["consensus", "phase"],
    ["consensus", "model"],
    ["paths", "solve"],
    ["paths", "sweep"],
    ["paths", "sample"],
    ["paths", "prune"],
    ["reproduce"],
]
TINY_BB = ["--steps", "4", "--d-model", "16", "--d-mlp", "32", "--seq-len", "16", "--batch", "4",
           "--eval-batch", "8", "--ckpt-every", "4", "--threads", "1"]  # fmt: skip


@pytest.fixture
def no_cuda(monkeypatch):
    """A machine without CUDA, whatever this one has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    errors = [line for line in err if line.startswith("attnlab: error:")]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err), err
    return errors[0]


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
def test_every_computing_command_takes_device(argv):
    args = build_parser().parse_args([*argv, "--device", "cuda:1"])
    assert args.device == "cuda:1"
    assert build_parser().parse_args(argv).device in ("cpu", None)  # None: bb/series train (resume keeps its own)


def test_device_forms():
    for ok in ("cpu", "cuda", "cuda:0", "cuda:12", "auto"):
        assert D.check_device(ok) == ok
    for bad in ("gpu", "cuda:", "cuda:x", "CUDA", "", 0, None):
        with pytest.raises(InputError, match="device must be one of cpu, cuda, cuda:N, auto"):
            D.check_device(bad)


def test_resolve_refuses_cuda_without_it_and_auto_falls_back(no_cuda):
    with pytest.raises(InputError, match="no CUDA device") as exc:
        D.resolve("cuda")
    assert "\n" not in str(exc.value)
    with pytest.raises(InputError, match="no CUDA device"):
        D.resolve("cuda:3")
    assert D.resolve("auto") == torch.device("cpu")
    assert D.resolve("cpu") == torch.device("cpu")


def test_resolve_counts_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert D.resolve("cuda:1") == torch.device("cuda", 1)
    assert D.resolve("auto") == torch.device("cuda")
    with pytest.raises(InputError, match="has 2 CUDA device"):
        D.resolve("cuda:2")


CPU_ONLY: dict[str, str] = {}  # the commands that keep computing on the cpu, and why (none left: issue 22)


def test_cpu_only_commands_refuse_cuda_even_with_a_gpu(monkeypatch):
    """With a GPU present, a cpu-only command refuses cuda in one line that says why; auto means cpu for it."""
    from attnlab.core.registry import resolve

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for command, why in CPU_ONLY.items():
        cls, _ = resolve(command)
        reason = cls.CPU_ONLY
        assert reason.startswith(command) and why in reason
        with pytest.raises(InputError) as exc:
            D.resolve("cuda", gpu=reason)
        line = str(exc.value)
        assert "\n" not in line and line.startswith(f"--device cuda: {command} ") and "not available" in line
        assert D.resolve("auto", gpu=reason) == torch.device("cpu")
    for command in ("series train", "consensus simulate", "consensus phase", "consensus model", "paths sample",
                    "paths solve", "paths sweep", "paths prune", "bb train", "bb intervene"):  # fmt: skip
        reason = getattr(resolve(command)[0], "CPU_ONLY", None)  # none, or one that depends on the run's options
        assert reason is None or isinstance(reason, property), command  # these compute on the device


@pytest.mark.parametrize(
    "argv",
    [["bb", "train", *TINY_BB], ["consensus", "phase", "--num-betas", "2", "--starts", "2", "--t-max", "1"],
     ["consensus", "simulate", "--batch", "2", "--t-max", "1"], ["paths", "solve", "--P", "20", "--n-test", "20"],
     ["series", "train", "--steps", "2", "--save-every", "1", "--batch", "2", "--seq-len", "8", "--d-model", "8",
      "--d-mlp", "8", "--layers", "1"],
     ["consensus", "model", "--passes", "1"], ["paths", "sample", "--P", "20", "--n-test", "20"],
     ["paths", "sweep", "--P", "20", "--n-test", "20"], ["paths", "prune", "--steps", "2"]],
    ids=["bb train", "consensus phase", "consensus simulate", "paths solve", "series train", "consensus model",
         "paths sample", "paths sweep", "paths prune"],
)  # fmt: skip
def test_cli_cuda_without_cuda_is_one_line_and_leaves_no_folder(capsys, tmp_path, no_cuda, argv):
    out = tmp_path / "run"
    line = _one_line_error(capsys, [*argv, "--device", "cuda", "--out", str(out)])
    assert "--device cuda" in line and ("no CUDA device" in line or "not available" in line)
    assert not out.exists()


def test_resume_keeps_the_saved_device_unless_given(tmp_path, no_cuda):
    from attnlab.bb.cli import train_config
    from attnlab.bb.training import resumed

    out = tmp_path / "run"
    assert main(["bb", "train", *TINY_BB, "--device", "auto", "--out", str(out)]) == 0
    parse = build_parser().parse_args
    args = parse(["bb", "train", "--resume", "--out", str(out), "--steps", "8"])
    assert resumed(train_config(args, "resume"), out).device == "auto"
    args = parse(["bb", "train", "--resume", "--out", str(out), "--device", "cpu"])
    assert resumed(train_config(args, "resume"), out).device == "cpu"


def test_bad_device_text_names_the_field(capsys, tmp_path):
    line = _one_line_error(capsys, ["bb", "train", *TINY_BB, "--device", "gpu", "--out", str(tmp_path / "r")])
    assert "device must be one of" in line


def test_precision_needs_a_cuda_device():
    from attnlab.bb.config import resolve_config

    with pytest.raises(InputError, match="precision bf16 is a CUDA mode"):
        resolve_config("cpu", steps=4, precision="bf16")
    assert resolve_config("cpu", steps=4, precision="tf32", device="auto").precision == "tf32"


def test_config_and_manifest_record_the_device(tmp_path, no_cuda):
    """cpu (the default) is left out of config.json, so CPU runs keep their files and hashes; any other value is
    written; manifest.json always names the resolved device."""
    assert main(["bb", "train", *TINY_BB, "--out", str(tmp_path / "cpu")]) == 0
    assert "device" not in json.loads((tmp_path / "cpu" / "config.json").read_text())
    assert json.loads((tmp_path / "cpu" / "manifest.json").read_text())["device"] == "cpu"
    assert main(["bb", "train", *TINY_BB, "--device", "auto", "--out", str(tmp_path / "auto")]) == 0
    assert json.loads((tmp_path / "auto" / "config.json").read_text())["device"] == "auto"
    assert json.loads((tmp_path / "auto" / "manifest.json").read_text())["device"] == "cpu"
    for name in ("metrics.jsonl",):  # auto on a CPU-only machine is the cpu run, bit for bit
        assert (tmp_path / "cpu" / name).read_bytes() == (tmp_path / "auto" / name).read_bytes()


def test_gpu_memory_refusal(monkeypatch):
    monkeypatch.setattr(D, "memory_bytes", lambda device: 2**30)
    with pytest.raises(InputError, match=r"about 4 GiB on cuda \(limit 1 GiB, 90% of its free memory\)"):
        budget.check_device_memory(4 * 2**30, "this run", "cuda")
    budget.check_device_memory(2**29, "this run", "cuda")  # fits


def test_gpu_memory_is_not_checked_on_the_cpu():
    assert D.memory_bytes(torch.device("cpu")) is None
    budget.check_device_memory(1e30, "this run", torch.device("cpu"))  # the configs check the RAM instead


def test_bb_train_refuses_a_size_over_the_gpu_memory(monkeypatch):
    from attnlab.bb import run as bb_run
    from attnlab.bb.config import resolve_config, train_memory

    cfg = resolve_config("paper", steps=10)
    monkeypatch.setattr(bb_run, "resolve", lambda device: torch.device("cpu"))
    monkeypatch.setattr(D, "memory_bytes", lambda device: int(train_memory(cfg) / 2))
    with pytest.raises(InputError, match="bb train --d-model 256 --seq-len 256 --batch 512 would need about"):
        bb_run._train_device(cfg)


@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_phase_gpu_loop_agrees_with_the_cpu_loop(method):
    """`sweep_chunk_resident` (the GPU path: no retirement, fractions kept on the device) against `_sweep_chunk`
    (retirement, fractions read back each step), both on the CPU: the same fractions to float64 rounding."""
    from attnlab.consensus import sweeps
    from attnlab.consensus.dynamics import check_tokens

    g = torch.Generator().manual_seed(3)
    X0 = check_tokens(torch.randn(16, 8, 3, generator=g, dtype=torch.float64))
    bs = np.array([0.5, 2.0, 6.0])
    sweep = sweeps.Sweep(t_max=12.0, h=0.1, method=method, kind="SA", theta=0.999)  # 120 steps
    cpu = sweeps._sweep_chunk(X0, bs, sweep, retire=method == "euler")
    resident = sweeps.sweep_chunk_resident(X0, bs, sweep)
    assert cpu.shape == resident.shape == (3, 121)
    assert np.abs(cpu - resident).max() <= 1e-12
    assert (resident[:, -1] == 1).any() and (resident[:, -1] < 1).any()  # some betas cluster (retire), some not


def test_phase_resident_names_the_first_non_finite_step():
    from attnlab.consensus import sweeps
    from attnlab.errors import NumericalError

    X0 = torch.full((2, 4, 3), float("nan"), dtype=torch.float64)
    with pytest.raises(NumericalError, match=r"non-finite state at t=0, h=0.1"):
        sweeps.sweep_chunk_resident(X0, np.array([1.0]), sweeps.Sweep(t_max=0.5, h=0.1))  # 5 steps


def test_sweep_with_cuda_trials_reserves_a_gpu_and_is_refused_without_one(no_cuda):
    from attnlab.sweep.config import SweepConfig, SweepSpec
    from attnlab.sweep.engine import preflight

    spec = SweepSpec(command="bb train", base={"steps": 4, "device": "cuda"}, grid={"seed": [0, 1]})
    config = SweepConfig(spec=spec)
    assert config.gpus_per_trial == 1.0
    with pytest.raises(InputError, match=r"\(its trials set device = cuda\): this machine has 0 GPU"):
        preflight(config)
    cpu = SweepSpec(command="bb train", base={"device": "cpu"}, grid={"seed": [0]})
    assert SweepConfig(spec=cpu).gpus_per_trial == 0.0
    grid = SweepSpec(command="bb train", grid={"device": ["cpu", "cuda:0"]})
    assert SweepConfig(spec=grid).gpus_per_trial == 1.0


def test_reproduce_passes_the_device_to_the_gpu_runs_only():
    from attnlab.reproduce.experiments import SIZES, sized

    full = SIZES["full"]
    assert sized("cons_phase", "full", "cuda")["device"] == "cuda"
    assert "device" not in sized("cons_phase", "full", "cpu")
    gpu = [n for n in full if "device" in sized(n, "full", "cuda")]
    assert "bb_paper" in gpu and not any(n.startswith(("paths_", "real_", "series_")) for n in gpu)


def test_reproduce_runs_bb_intervene_on_the_device(tmp_path):
    from attnlab.reproduce.experiments import EXPERIMENTS, sized

    def fields(device: str) -> dict:
        (run,) = EXPERIMENTS["bb_intervene"].runs(0, sized("bb_intervene", "tiny", device), tmp_path)
        return dict(run.config)

    assert fields("cuda")["device"] == "cuda" and "device" not in fields("cpu")


def test_a_report_written_without_plotly_gets_a_stub(tmp_path, monkeypatch):
    """The GPU machine has no plotly: a report's plotly.min.js is then a stub, and the page is still written."""
    import sys

    from attnlab.reports import page as report

    monkeypatch.setitem(sys.modules, "plotly.offline", None)  # `from plotly.offline import ...` raises ImportError
    assert report.plotly_asset(tmp_path) == report.PLOTLY_ASSET
    assert (tmp_path / report.PLOTLY_ASSET).read_text() == report.PLOTLY_MISSING


# --- consensus simulate, series train, consensus model on the requested device -----------------------------------
def _random_run(sync_every, **kw):
    import warnings

    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import integrate
    from attnlab.consensus.schedules import make_schedule

    X0 = torch.randn(4, 6, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    sch = make_schedule("random", 3, 1, 0, scale=kw.pop("scale", 1.0), value="random", delta=0.5)
    spec = AttentionSpec("SA", "full", torch.tensor([1.0]))
    measures = ("E_first", "E_pair", "clustered_fraction", "cluster_count")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the step-bound warning of the blow-up case
        return integrate(X0, sch, spec, 6.0, 0.1, kw.pop("method", "euler"), measures=measures, record_every=3,
                         stop_on_error=True, sync_every=sync_every, **kw)  # fmt: skip


@pytest.mark.parametrize("method", ["rk4", "euler", "exp_euler", "postnorm", "prenorm"])
def test_deferred_chunks_give_the_checked_steps_results(method):
    """The GPU loop (`sync_every` > 1: acceptance kept on the device, one read-back a chunk, a chunk's measures in one
    batched call) gives what the checked loop (one step at a time, the cpu's) gives: the same states bit for bit
    (the step's ops are the same), the measures to rounding (batched; bit for bit on this machine)."""
    checked, deferred = _random_run(1, method=method), _random_run(7, method=method)
    assert checked.stopped is None and len(checked.t) == 61
    for name, values in checked.measures.items():  # bit for bit here; batched matmuls may round apart elsewhere
        assert np.allclose(values, deferred.measures[name], rtol=1e-13, atol=1e-15), name
    assert np.array_equal(checked.states, deferred.states) and np.array_equal(checked.t_states, deferred.t_states)
    assert torch.equal(checked.final, deferred.final)


def test_deferred_chunks_stop_at_the_same_step_with_the_same_message():
    """A step rejected inside a chunk (step 31 of chunks of 7) ends the run where the checked loop ends it: the same
    NumericalError text, the same partial measures and states, the state before the bad step recorded."""
    checked, deferred = _random_run(1, scale=3.0), _random_run(7, scale=3.0)
    assert checked.stopped is not None and "t=3," in checked.stopped and len(checked.t) == 31
    assert deferred.stopped == checked.stopped
    for name, values in checked.measures.items():
        assert values.shape == (4, 31) and np.allclose(values, deferred.measures[name], rtol=1e-13, atol=1e-15), name
    assert np.array_equal(checked.states, deferred.states) and np.array_equal(checked.t_states, deferred.t_states)


def test_the_integration_step_follows_the_device_argument():
    """Every tensor the hot loop makes (weights, beta, the step's update, its acceptance, the projected state) is
    made on the field's device: checked on torch's meta device (shapes only, no data)."""
    from attnlab.consensus.dynamics import AttentionSpec
    from attnlab.consensus.integrators import Field, advance, project, step_ok
    from attnlab.consensus.schedules import make_schedule

    meta = torch.device("meta")
    sch = make_schedule("random", 3, 2, 0, value="random", delta=0.5)
    field_ = Field(sch, AttentionSpec("SA", "causal", torch.tensor([1.0, 2.0])), 3, 4, meta)
    assert field_.spec.beta.device == meta and all(w.device == meta for w in field_.weights(0.0))
    X = torch.empty(4, 5, 3, dtype=torch.float64, device=meta)
    for method in ("rk4", "euler", "exp_euler", "postnorm", "prenorm"):
        Y, F, _ = advance(method, field_, 0.0, X, 0.1)
        ok = step_ok(method, Y, True, 0.05)
        assert {Y.device, F.device, ok.device, project(method, Y).device} == {meta}, method
        assert Y.dtype == torch.float64 and Y.shape == X.shape and ok.shape == ()


def test_chunk_size_is_one_on_the_cpu_and_bounded_elsewhere():
    from attnlab.consensus.integrators import CHUNK_BYTES, chunk_steps

    assert chunk_steps(torch.zeros(2, 3, 3), None) == 1 and chunk_steps(torch.zeros(2, 3, 3), 9) == 9
    assert chunk_steps(torch.empty(2, 3, 3, device="meta"), None) == 256
    mid = chunk_steps(torch.empty(64, 64, 8, device="meta"), None)  # 2 MiB of Gram matrices a step
    assert mid == 32 and mid * 8 * 64 * 64 * 64 <= CHUNK_BYTES
    assert chunk_steps(torch.empty(64, 512, 8, device="meta"), None) == 1  # a step alone exceeds the bound


def test_model_stack_helpers_follow_the_device():
    """consensus model: captured block arguments are moved to the state's device; random blocks are drawn from the
    cpu generator and copied, so every device gets the same draws."""
    from attnlab.consensus.realmodel import _moved, _normal

    meta = torch.device("meta")
    call = ((torch.zeros(2),), {"mask": torch.ones(1, 1, 3, 3), "rope": (torch.ones(3), torch.ones(3)), "n": 3})
    args, kw = _moved(call, meta)
    assert args[0].device == meta and kw["mask"].device == meta and {t.device for t in kw["rope"]} == {meta}
    assert kw["n"] == 3
    cpu, other = torch.empty(4, 5), torch.empty(4, 5, device=meta)
    _normal(cpu, 0.02, torch.Generator().manual_seed(7))
    _normal(other, 0.02, torch.Generator().manual_seed(7))  # drawn on the cpu, copied (meta keeps no data)
    again = torch.empty(4, 5).normal_(0.0, 0.02, generator=torch.Generator().manual_seed(7))
    assert torch.equal(cpu, again) and other.device == meta


SIM = ["consensus", "simulate", "--batch", "3", "--n", "6", "--t-max", "2", "--schedule", "random", "--threads", "1"]
SAMPLE = ["paths", "sample", "--P", "20", "--n-test", "20", "--chains", "2", "--warmup", "10", "--draws", "8",
          "--leapfrog", "2", "--threads", "1"]  # fmt: skip
SERIES = ["series", "train", "--steps", "4", "--save-every", "2", "--batch", "2", "--seq-len", "8", "--d-model", "8",
          "--d-mlp", "16", "--layers", "1", "--threads", "1"]  # fmt: skip


@pytest.mark.parametrize("argv", [SIM, SERIES, SAMPLE], ids=["consensus simulate", "series train", "paths sample"])
def test_auto_is_the_cpu_run_bit_for_bit_and_is_recorded(tmp_path, no_cuda, argv):
    """`--device auto` on a machine without CUDA: config.json keeps "auto", manifest.json names the cpu, every
    result file equals the `--device cpu` run's (whose config.json has no device field)."""
    assert main([*argv, "--out", str(tmp_path / "cpu")]) == 0
    assert main([*argv, "--device", "auto", "--out", str(tmp_path / "auto")]) == 0
    assert "device" not in json.loads((tmp_path / "cpu" / "config.json").read_text())
    assert json.loads((tmp_path / "auto" / "config.json").read_text())["device"] == "auto"
    assert json.loads((tmp_path / "auto" / "manifest.json").read_text())["device"] == "cpu"
    files = [p.relative_to(tmp_path / "cpu") for p in (tmp_path / "cpu").rglob("*")
             if p.suffix in (".npy", ".npz", ".jsonl", ".safetensors", ".csv")]  # fmt: skip
    assert len(files) >= 2
    for name in files:
        assert (tmp_path / "cpu" / name).read_bytes() == (tmp_path / "auto" / name).read_bytes(), name


def test_series_and_simulate_refuse_a_size_over_the_gpu_memory(monkeypatch):
    from attnlab.consensus import run as cons_run
    from attnlab.consensus.config import SimulateConfig
    from attnlab.series import run as series_run
    from attnlab.series.config import SeriesTrainConfig

    monkeypatch.setattr(D, "memory_bytes", lambda device: 2**20)  # a GPU with 1 MiB free
    monkeypatch.setattr(series_run, "resolve", lambda device: torch.device("cuda"))
    with pytest.raises(InputError, match=r"series train --batch 32 --seq-len 64 would need about .* GiB on cuda"):
        series_run._device(SeriesTrainConfig())
    monkeypatch.setattr(D, "resolve", lambda device, *a, **k: torch.device("cuda"))
    with pytest.raises(InputError, match=r"consensus simulate --batch 64 --n 32 would need about"):
        cons_run._simulate_device(SimulateConfig())


def test_the_sampler_follows_the_device_of_its_path_kernels():
    """paths sample: the target built on kernels on a device (meta here) makes its prior draw, log density,
    gradient and HMC transition there (the draws come from the cpu generator and are copied)."""
    from attnlab.paths.networks.kernels import PathGram
    from attnlab.paths.sampling.sampler import CollapsedTarget, FullTarget, PredictorSums, _Chains, _transition
    from attnlab.paths.tasks.data import build_data

    data, meta = build_data("markov", 20, 20), torch.device("meta")
    gram = PathGram(data.gram.xit.to(meta), data.gram.mode)
    for cls in (CollapsedTarget, FullTarget):
        target = cls(data.cfg.with_widths(10), gram, data.y_train, 0.1)
        q = target.prior_draw(3, torch.Generator().manual_seed(0))
        chains = _Chains(q, *target.log_prob_and_grad(q))
        eps = torch.full((3,), 0.1, dtype=torch.float64, device=meta)
        minv = torch.ones(3, target.dim, dtype=torch.float64, device=meta)
        stats = _transition(target, chains, eps, minv, 2, torch.Generator().manual_seed(1))
        made = [q, chains.q, chains.lp, chains.g, chains.bad, *stats.values()]
        assert {t.device for t in made} == {meta}, cls.__name__
    sums = PredictorSums(target, data.xit_test.to(meta))
    assert {sums.mean.device, sums.cvar.device, sums.fixed_idx.device} == {meta}


def test_multi_output_sampling_refuses_cuda():
    from attnlab.paths.config import SampleConfig

    with pytest.raises(InputError, match="--outputs 2 samples on the cpu only"):
        SampleConfig(outputs=2, device="cuda")
    assert SampleConfig(outputs=2, device="auto").device == "auto"


def test_paths_sample_refuses_a_size_over_the_gpu_memory(monkeypatch):
    from attnlab.paths.config import SampleConfig
    from attnlab.paths.sampling.posterior import check_sample_memory
    from attnlab.paths.tasks.data import build_data

    gram = build_data("markov", 20, 20).gram
    check_sample_memory(SampleConfig(P=20), gram, torch.device("cpu"))  # the cpu: the config checked the RAM
    monkeypatch.setattr(D, "memory_bytes", lambda device: 2**10)
    with pytest.raises(InputError, match=r"paths sample --chains 4 --draws 2000 --P 20 would need about"):
        check_sample_memory(SampleConfig(P=20), gram, torch.device("cuda"))


@pytest.mark.parametrize("variant", ["periodic", "random"])
def test_model_stack_measured_per_pass_gives_the_per_step_results(variant):
    """consensus model's GPU recording (a pass's states measured in one batched call at its end, finiteness checked
    once a pass) gives what the cpu's per-step recording gives, on a tiny random Llama."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnlab.consensus.realmodel import StackRunner, control_prompts, iterate_stack

    cfg = LlamaConfig(vocab_size=53, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=32)  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        runner = StackRunner(LlamaForCausalLM(cfg).eval())
    ids = torch.randint(0, 53, (4, 8), generator=torch.Generator().manual_seed(1))
    ctrl = control_prompts(ids, [2, 2])
    step, per_pass = (iterate_stack(runner, ids, variant, 3, True, 1, 0, controls=ctrl, decode=True, per_pass=p)
                      for p in (False, True))  # fmt: skip
    assert step.curves.keys() == per_pass.curves.keys() and step.depth.keys() == per_pass.depth.keys()
    for name, values in step.curves.items():
        assert values.shape == (4, 7) and np.allclose(values, per_pass.curves[name], rtol=1e-12, atol=1e-14), name
    for name, values in step.depth.items():
        assert np.array_equal(values, per_pass.depth[name]), name
    assert np.array_equal(step.top1, per_pass.top1)


# --- the trace layer on the requested device ---------------------------------------------------------------------
class CpuOps:
    """A dispatch mode that notes every aten op that computes with, or makes, a cpu tensor of one element or more
    (copies to another device excepted: they are how cpu inputs get there)."""

    COPIES = ("aten._to_copy", "aten.copy_", "aten.lift_fresh")

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        notes = self.ops = []
        copies = self.COPIES

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tensors = [t for t in torch.utils._pytree.tree_leaves((args, kwargs, out)) if torch.is_tensor(t)]
                if not str(func).startswith(copies) and any(t.device.type == "cpu" and t.dim() for t in tensors):
                    notes.append(str(func))
                return out

        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


@pytest.mark.parametrize("attention", ["softmax", "relu"])
def test_the_traced_forward_and_every_intervention_follow_the_device(monkeypatch, attention):
    """On torch's meta device, the toy model with every kind of intervention hooked in runs there without a cpu op
    (the cpu query mask is copied there), and the recorder is handed tensors on that device only (the spy stands in
    for it: meta tensors hold no data to reduce)."""
    from attnlab.toy.model import ToyConfig, ToyTransformer
    from attnlab.tracing.adapters import toy
    from attnlab.tracing.interventions import MoveToSink, ZeroDims, ZeroHead, ZeroLayer, ZeroMLP

    meta, seen = torch.device("meta"), []

    class Spy:  # the recorder's surface that trace_toy uses
        def __init__(self, *args, **kwargs):
            pass

        def begin_batch(self, tokens):
            seen.append(("tokens", tokens.device))

        def attention(self, layer, pattern, scores):
            seen.extend([("pattern", pattern.device), ("scores", scores.device)])

        def value_norms(self, layer, norms):
            seen.append(("values", norms.device))

        def residual(self, index, hidden):
            seen.append(("residual", hidden.device))

        def result(self):
            return None

    cfg = ToyConfig(vocab=12, d_model=16, n_layers=2, n_heads=2, d_mlp=32, max_len=8, attn=attention, no_mlp=[1])
    model = ToyTransformer(cfg).to(meta)
    queries = torch.zeros(3, 8, dtype=torch.bool)  # a cpu mask, as bb intervene builds it
    ivs = [ZeroHead(0, 1), MoveToSink(0, 0), MoveToSink(1, 1, queries=queries), ZeroMLP(0), ZeroLayer(1),
           ZeroDims(0, (3,), (0,))]  # fmt: skip
    monkeypatch.setattr(toy, "TraceRecorder", Spy)
    tokens = torch.zeros(3, 8, dtype=torch.long, device=meta)
    with CpuOps() as cpu:
        _, logits = toy.trace_toy(model, tokens, interventions=ivs, chunk=3)
    assert cpu.ops == []
    assert logits.device == meta and logits.shape == (3, 8, 12)
    assert {d for _, d in seen} == {meta} and len(seen) == 1 + 2 * 3 + 3  # tokens; per layer 3; residual 0..2


def test_the_attention_reductions_follow_the_device():
    """The recorder's float64 reductions of a whole pattern run on its device (meta here) without a cpu op, every
    result there, in the shapes the recorder adds up."""
    from attnlab.tracing.recorder import attention_sums

    meta = torch.device("meta")
    A = torch.empty(2, 3, 5, 5, dtype=torch.float64, device=meta)
    i = torch.arange(5, dtype=torch.float64, device=meta)
    with CpuOps() as cpu:
        sums, no_scores = attention_sums(A, torch.empty_like(A), i), attention_sums(A, None, i)
    assert cpu.ops == []
    shapes = {"col_sum": (3, 5), "key0": (2, 3, 5), "ent_sum": (3,), "ent_count": (3,), "empty": (3,),
              "s0": (2, 3, 5), "rest": (2, 3, 5)}  # fmt: skip
    assert {k: tuple(v.shape) for k, v in sums.items()} == shapes
    assert {v.device for v in sums.values()} == {meta}
    assert set(no_scores) == set(shapes) - {"s0", "rest"}


# --- bb intervene on the requested device ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bb_run(tmp_path_factory):
    """A tiny trained BB run with two layers of two heads (every kind of intervention, a layer without an MLP)."""
    out = tmp_path_factory.mktemp("bb") / "run"
    argv = ["bb", "train", *TINY_BB, "--layers", "2", "--heads", "2", "--no-mlp", "1", "--out", str(out)]
    assert main(argv) == 0
    return out


def test_intervene_auto_is_the_cpu_run_bit_for_bit(tmp_path, no_cuda, bb_run):
    argv = ["bb", "intervene", str(bb_run), "--threads", "1"]
    assert main([*argv, "--out", str(tmp_path / "cpu")]) == 0
    assert main([*argv, "--device", "auto", "--out", str(tmp_path / "auto")]) == 0
    assert "device" not in json.loads((tmp_path / "cpu" / "config.json").read_text())
    assert json.loads((tmp_path / "auto" / "config.json").read_text())["device"] == "auto"
    assert json.loads((tmp_path / "auto" / "manifest.json").read_text())["device"] == "cpu"
    rows = (tmp_path / "cpu" / "interventions.json").read_bytes()
    assert rows == (tmp_path / "auto" / "interventions.json").read_bytes()
    assert len(json.loads(rows)) == 1 + 2 * 2 * 3 + 1 + 2  # full; per head: zero, move (all, non-trigger); MLP; layers


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_intervene_cuda_without_cuda_is_one_line_and_leaves_no_folder(capsys, tmp_path, no_cuda, bb_run, device):
    out = tmp_path / "iv"
    line = _one_line_error(capsys, ["bb", "intervene", str(bb_run), "--device", device, "--out", str(out)])
    assert f"--device {device}: this machine has no CUDA device" in line
    assert not out.exists()


def test_intervene_refuses_a_size_over_the_gpu_memory(monkeypatch, tmp_path, bb_run):
    from attnlab.bb import run as bb_run_module
    from attnlab.bb.config import InterveneConfig, intervene_memory, read_train_config

    cfg = read_train_config(bb_run)
    estimate = intervene_memory(cfg)
    assert estimate > 8 * cfg.eval_batch * 2 * cfg.seq_len**2  # at least a layer's float64 pattern
    monkeypatch.setattr(bb_run_module, "resolve", lambda device: torch.device("cuda"))
    monkeypatch.setattr(D, "memory_bytes", lambda device: int(estimate / 2))
    with pytest.raises(InputError, match=r"bb intervene on a run with --eval-batch 8 --seq-len 16 --d-model 16 would "
                                         r"need about .* GiB on cuda .*; use --device cpu") as exc:  # fmt: skip
        bb_run_module.intervene(InterveneConfig(str(bb_run)), tmp_path / "iv")
    assert "\n" not in str(exc.value) and not (tmp_path / "iv").exists()
    monkeypatch.setattr(D, "memory_bytes", lambda device: int(estimate * 2))
    assert bb_run_module._intervene_device(InterveneConfig(str(bb_run))) == torch.device("cuda")  # fits


def test_intervene_moves_the_model_to_the_resolved_device(monkeypatch, tmp_path, bb_run):
    """`bb intervene` evaluates the model on the device `resolve` gives (meta here, standing in for a GPU): the
    evaluation sees the model there; the rows it returns are what the folder gets."""
    from attnlab.bb import intervention_risks as IR
    from attnlab.bb import run as bb_run_module
    from attnlab.bb.config import InterveneConfig
    from attnlab.bb.experiment import load_run

    cfg, task, model, state = load_run(bb_run)
    expected = IR.evaluate_interventions(cfg, task, model, int(state["step"]))
    seen = []

    def spy(cfg_, task_, model_, step):
        seen.append(next(model_.parameters()).device)
        return expected

    monkeypatch.setattr(bb_run_module, "resolve", lambda device: torch.device("meta"))
    monkeypatch.setattr(IR, "evaluate_interventions", spy)
    path = bb_run_module.intervene(InterveneConfig(str(bb_run)), tmp_path / "iv").path
    assert seen == [torch.device("meta")]
    assert json.loads((path / "interventions.json").read_text()) == json.loads(json.dumps(expected))


def test_intervene_feeds_the_batch_to_the_models_device(monkeypatch, bb_run):
    """`evaluate_interventions` copies the cpu-drawn batch to the model's device once, traces every intervention in
    one chunk there, and computes the same rows from what comes back (the spy traces a cpu copy instead: meta has no
    data)."""
    import copy

    from attnlab.bb import intervention_risks as IR
    from attnlab.bb.experiment import load_run

    cfg, task, model, state = load_run(bb_run)
    expected = IR.evaluate_interventions(cfg, task, model, 4)
    cpu_inputs = torch.as_tensor(task.eval_batch(cfg.eval_batch, cfg.seq_len, cfg.eval_seed)[:, :-1])
    real, meta, seen = IR.trace_toy, torch.device("meta"), []

    def spy(model_, tokens, vocab, interventions=(), chunk=256):
        seen.append((next(model_.parameters()).device, tokens.device, tuple(tokens.shape), chunk))
        return real(model, cpu_inputs, vocab, interventions=interventions, chunk=chunk)

    monkeypatch.setattr(IR, "trace_toy", spy)
    monkeypatch.setattr(IR, "first_nonfinite", lambda m: None)  # reads values, which meta lacks
    assert IR.evaluate_interventions(cfg, task, copy.deepcopy(model).to(meta), 4) == expected
    assert seen == [(meta, meta, (8, 16), 8)] * len(expected)


# --- the theory's solve on the requested device (paths solve, sweep, prune) ---------------------------------------
@pytest.mark.parametrize("method, form", [("newton", "chain"), ("lbfgs", "chain"), ("newton", "simple")])
def test_the_torch_solve_agrees_with_the_numpy_fast_path(monkeypatch, method, form):
    """The solve a GPU runs (the torch action `evaluate`, L-BFGS fed from it, Newton on its autograd Hessian), here
    on the cpu (`fast=False`), against the cpu's default (the NumPy `FastAction` and a finite-difference Hessian):
    two implementations, the same saddle point. Bound: 1e-8 relative on U and S (measured ~1e-14 here)."""
    from attnlab.paths.tasks.data import build_data
    from attnlab.paths.theory import fast as fast_module
    from attnlab.paths.theory.points import make_problem
    from attnlab.paths.theory.solver import solve_saddle_point

    prob = make_problem(build_data("markov", 40, 20), 10.0, 0.05, form)
    numpy_sp = solve_saddle_point(prob, method, tol=1e-10, max_iter=1000)

    def refuse(*args, **kwargs):
        raise AssertionError("the torch path must not use the NumPy action")

    monkeypatch.setattr(fast_module, "FastAction", refuse)
    torch_sp = solve_saddle_point(prob, method, tol=1e-10, max_iter=1000, fast=False)
    assert numpy_sp.converged and torch_sp.converged and torch_sp.max_grad < 1e-10
    assert numpy_sp.iterations > 0 and any(row["phase"] == "lbfgs" for row in torch_sp.trace)
    for a, b in zip(numpy_sp.chain, torch_sp.chain, strict=True):
        assert np.abs(a - b).max() <= 1e-8 * np.abs(a).max()
    assert abs(numpy_sp.S - torch_sp.S) <= 1e-8 * abs(numpy_sp.S)
    assert numpy_sp.hessian_min_eig == pytest.approx(torch_sp.hessian_min_eig, rel=1e-6)


def test_the_solve_follows_the_device_of_its_problem():
    """Every tensor the solver's hot path makes (the parametrisation, K(U), the Cholesky of K+TI and of each U_l,
    Gamma, the gradients, the factor flags, the fixed-point blocks) is made where the problem's kernels are:
    checked on torch's meta device (shapes only), for both entropy forms and for two outputs."""
    from attnlab.paths.sampling.outputs import build_multi, multi_problem
    from attnlab.paths.tasks.data import build_data
    from attnlab.paths.theory.action import evaluate
    from attnlab.paths.theory.points import make_problem
    from attnlab.paths.theory.solver import Param, _chain_blocks

    meta, data = torch.device("meta"), build_data("markov", 20, 20)
    problems = [make_problem(data, 10.0, 0.1, form) for form in ("chain", "simple")]
    problems.append(multi_problem(build_multi(10, 10, "4path", 2), 10.0, 0.1))
    for cpu_prob in problems:
        prob = cpu_prob.to(meta)
        assert cpu_prob.to("cpu") is cpu_prob and cpu_prob.gram.device.type == "cpu"  # the cpu problem is kept
        assert {prob.Y.device, prob.gram.xit.device, prob.gram.M.device} == {meta}
        par = Param(prob.sizes(), prob.device)
        theta = par.from_Us(prob.gp_point())
        Rs = par.Rs(theta)
        ev = evaluate(prob, [R @ R.T for R in Rs], checked=False)
        made = [theta, *Rs, ev.S, ev.E, ev.ent, *ev.grads, ev.U_a, ev.chol, ev.infos, par.grad_theta(Rs, ev.grads)]
        made.append(prob.gram.kernel(Rs[0] @ Rs[0].T))
        if prob.outputs == 1:
            new = [R @ R.T for R in Rs]
            made += [_chain_blocks(prob, new)[0], *new]
        assert {t.device for t in made} == {meta}, (prob.form, prob.outputs)
        assert ev.infos.shape == (1 + len(prob.sizes()),) and ev.chol.shape == (prob.gram.P, prob.gram.P)


def test_a_failed_factor_is_flagged_and_checked_after_the_evaluation():
    """The evaluation reads nothing back: a U_l that is not positive definite gives garbage values and a flag,
    and `evaluate` raises the same one-line NumericalError as before at its end."""
    from attnlab.errors import NumericalError
    from attnlab.paths.tasks.data import build_data
    from attnlab.paths.theory.action import evaluate
    from attnlab.paths.theory.points import make_problem

    prob = make_problem(build_data("markov", 20, 20), 10.0, 0.1)
    Us = prob.gp_point()
    Us[1] = -Us[1]
    ev = evaluate(prob, Us, checked=False)
    assert ev.infos.tolist()[0] == 0 and ev.infos.tolist()[2] != 0
    with pytest.raises(NumericalError, match="lost positive definiteness"):
        evaluate(prob, Us)


def test_the_gd_network_trains_on_the_device_of_its_weights():
    """paths prune's GD loop on torch's meta device: the forward (with a pruned head: the masks stay on the cpu and
    are copied), the Adam steps and the logged losses all stay there; the batch indices come from the cpu."""
    from attnlab.paths.pruning.gradient_descent import GDNetwork, gd_loop

    meta = torch.device("meta")
    model = GDNetwork(23, 2, 2, 8, 4).to(meta)
    model.set_pruned([(1, 0)])
    xp, yp = torch.empty(30, 12, 23, device=meta), torch.empty(30, device=meta)
    logged = gd_loop(model, xp, yp, 3, 4, 1e-3, 0.0, 0, progress=False)
    assert [step for step, _ in logged] == [0, 2] and {loss.device for _, loss in logged} == {meta}
    assert {p.device for p in model.parameters()} == {meta} and model.masks[1].device.type == "cpu"


def test_paths_solves_refuse_a_size_over_the_gpu_memory(monkeypatch, tmp_path):
    """`paths solve` (also --outputs 2), `paths sweep` and `paths prune` with a GPU of 1 MiB free: one line naming
    the size, before any folder exists. The estimate holds the path kernels M [n_paths^2, P^2] in float64."""
    from attnlab.paths import run as paths_run
    from attnlab.paths.config import PruneConfig, SolveConfig, SweepConfig
    from attnlab.paths.theory.solver import device_bytes

    assert device_bytes(100, 4, 231, "gram", [4, 2]) >= 8 * 16 * 100**2 + 8 * 16 * 100**2
    assert device_bytes(1000, 4, 231, "factor", [4, 2]) < device_bytes(1000, 4, 231, "gram", [4, 2])
    monkeypatch.setattr(D, "resolve", lambda device, *a, **k: torch.device("cuda"))
    monkeypatch.setattr(D, "memory_bytes", lambda device: 2**20)
    cases = [
        (paths_run.solve, SolveConfig(P=200, n_test=20), r"paths solve --P 200 \(4 paths, gram mode\) would need"),
        (paths_run.solve, SolveConfig(P=200, n_test=20, outputs=2), r"paths solve --outputs 2 --P 200 \(8 path-out"),
        (paths_run.sweep, SweepConfig(P=200, n_test=20, Ns=(10.0,)), r"paths sweep --P 200 \(4 paths"),
        (paths_run.prune, PruneConfig(steps=2), r"paths prune --width 128 --heads 4 --layers 2 --P 300 would need"),
    ]
    for fn, config, message in cases:
        with pytest.raises(InputError, match=message) as exc:
            fn(config, tmp_path / "run")
        assert "\n" not in str(exc.value) and "GiB on cuda" in str(exc.value)
        assert not (tmp_path / "run").exists()


PATHS_RUNS = {
    "paths solve": ["paths", "solve", "--P", "20", "--n-test", "20", "--threads", "1"],
    "paths sweep": ["paths", "sweep", "--P", "20", "--n-test", "20", "--Ns", "30", "10", "--threads", "1"],
    "paths prune": ["paths", "prune", "--steps", "6", "--P", "20", "--n-test", "20", "--pool", "40", "--width", "8",
                    "--heads", "2", "--Ns", "20", "--temperatures", "0.1", "--threads", "1"],
}  # fmt: skip


def _timeless(path):
    """A run's JSON / JSONL values without the keys that record time or folders."""

    def clean(obj):
        if isinstance(obj, dict):
            return {k: clean(v) for k, v in obj.items() if not any(w in k for w in ("wall", "seconds", "from_run"))}
        return [clean(v) for v in obj] if isinstance(obj, list) else obj

    lines = path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]
    return [clean(json.loads(line)) for line in lines]


@pytest.mark.parametrize("command", list(PATHS_RUNS))
def test_paths_auto_is_the_cpu_run_bit_for_bit(tmp_path, no_cuda, command):
    """`--device auto` without CUDA: the cpu run (the NumPy fast path), every array and safetensors file byte for
    byte and every JSON value equal (times aside); manifest.json names the cpu, config.json keeps "auto"."""
    argv = PATHS_RUNS[command]
    assert main([*argv, "--out", str(tmp_path / "cpu")]) == 0
    assert main([*argv, "--device", "auto", "--out", str(tmp_path / "auto")]) == 0
    assert json.loads((tmp_path / "auto" / "config.json").read_text())["device"] == "auto"
    assert json.loads((tmp_path / "auto" / "manifest.json").read_text())["device"] == "cpu"
    skip = ("config.json", "manifest.json")
    files = [p.relative_to(tmp_path / "cpu") for p in (tmp_path / "cpu").rglob("*") if p.is_file()]
    binary = [f for f in files if f.suffix in (".npy", ".npz", ".safetensors")]
    texts = [f for f in files if f.suffix in (".json", ".jsonl") and f.name not in skip]
    assert binary and texts, files
    for name in binary:
        assert (tmp_path / "cpu" / name).read_bytes() == (tmp_path / "auto" / name).read_bytes(), name
    for name in texts:
        assert _timeless(tmp_path / "cpu" / name) == _timeless(tmp_path / "auto" / name), name


def test_paths_sample_with_several_outputs_records_the_cpu_it_runs_on_under_auto(monkeypatch):
    """`paths sample --outputs 2 --device auto` on a GPU machine samples on the cpu (the multi-output target is cpu
    code), so auto resolves to the cpu there, as the manifest records; one output takes the GPU."""
    from attnlab.paths.config import SampleConfig
    from attnlab.runs import device_info

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(D, "describe", lambda device: {"device": str(device)})
    assert device_info(SampleConfig(outputs=2, device="auto"))["device"] == "cpu"
    assert device_info(SampleConfig(outputs=1, device="auto"))["device"] == "cuda"


def test_reproduce_hands_its_device_to_every_study_run_that_takes_one():
    """`attnlab reproduce --device cuda` (issue 22: "passed on to every study run"): a run whose command takes a
    device gets it, unless its experiment set one or its options keep it on the cpu; a command without a device
    field, and every run under --device cpu, is unchanged."""
    from attnlab.bb.config import TheoryConfig
    from attnlab.paths.config import SampleConfig, SolveConfig
    from attnlab.reproduce.execute import on_device
    from attnlab.scan.config import ScanConfig

    assert on_device(SolveConfig(), "cuda").device == "cuda"
    assert on_device(SolveConfig(), "cpu") == SolveConfig()
    assert on_device(SampleConfig(outputs=2), "cuda").device == "cpu"  # its multi-output target is cpu code
    assert on_device(SampleConfig(), "cuda:1").device == "cuda:1"
    assert on_device(ScanConfig(), "cuda").device == "cuda"  # the real-model rooms load the model there
    theory = TheoryConfig()
    assert on_device(theory, "cuda") is theory  # bb theory takes no device


def test_rows_per_block_keeps_the_cpu_blocks_and_widens_them_on_an_accelerator():
    """The cpu keeps its cache-sized blocks; an accelerator (any non-cpu device name: nothing is allocated) takes
    as many rows as keep a block within ACCELERATOR_BLOCK_ELEMENTS, never fewer than the cpu's."""
    from attnlab.core.device import ACCELERATOR_BLOCK_ELEMENTS, rows_per_block

    assert rows_per_block(512, "cpu", 576) == 512
    assert rows_per_block(512, torch.device("cpu"), 10**9) == 512
    wide = rows_per_block(512, "cuda", 576)
    assert wide == ACCELERATOR_BLOCK_ELEMENTS // 576 and wide * 576 <= ACCELERATOR_BLOCK_ELEMENTS < (wide + 1) * 576
    assert rows_per_block(512, "meta", 10**9) == 512  # a row too wide for the budget: the cpu's block, not zero
