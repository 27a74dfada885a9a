"""`--log tensorboard` / `--log mlflow`: the files are read back with TensorBoard's and MLflow's own readers."""

from __future__ import annotations

import json
import os

import pytest

from attnlab.bb.config import resolve_config
from attnlab.errors import InputError
from tests.reports.conftest import TINY_BB


def _tensorboard_scalars(folder, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


def _tensorboard_images(folder) -> dict[str, tuple[int, tuple[int, int, int]]]:
    """tag -> (step, [height, width, channels]) of the images in TensorBoard's event files under `folder`."""
    import io

    import numpy as np
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"images": 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["images"]:
        (event,) = acc.Images(tag)
        out[tag] = (event.step, np.asarray(Image.open(io.BytesIO(event.encoded_image_string))).shape)
    return out


def _png_shape(path) -> tuple[int, int, int]:
    import numpy as np
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB")).shape


def _artifacts(client, run_id, path=None) -> list[str]:
    return sorted(f.path for f in client.list_artifacts(run_id, path))


def _mlflow_runs(folder, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads its file store only with this set
    client = MlflowClient(tracking_uri=(folder / "mlruns").resolve().as_uri())
    exp = client.get_experiment_by_name("attnlab")
    return client, client.search_runs([exp.experiment_id])


def test_bb_train_logs_to_tensorboard_and_mlflow(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    from attnlab import bb

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    cfg = resolve_config("cpu", steps=10, log=["tensorboard", "mlflow"], **TINY_BB)
    assert cfg.log == ("tensorboard", "mlflow")
    run = bb.train(cfg, tmp_path / "run", progress=False).path
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ  # set only while the tracker wrote
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    want = {r["step"]: r["attn_sink"] for r in records}
    got = _tensorboard_scalars(run / "tensorboard", "attn_sink")
    assert got.keys() == want.keys() and all(got[s] == pytest.approx(want[s], rel=1e-6) for s in want)
    loss = _tensorboard_scalars(run / "tensorboard", "excess_risk_bigram")
    assert loss[10] == pytest.approx(records[-1]["excess_risk_bigram"], rel=1e-6)
    client, runs = _mlflow_runs(run, monkeypatch)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED" and runs[0].info.run_name == "run"
    history = client.get_metric_history(runs[0].info.run_id, "attn_sink")
    assert {m.step: m.value for m in history} == pytest.approx(want)
    assert runs[0].data.params["d_model"] == "32" and runs[0].data.params["optimizer"] == "adam"
    # the figures the run drew and its report, in the same tracker runs as the metrics
    pngs = sorted((run / "figures").glob("*.png"))
    assert pngs, "the run drew no figure"
    images = _tensorboard_images(run / "tensorboard")
    assert images == {f"figures/{p.stem}": (10, _png_shape(p)) for p in pngs}
    run_id = runs[0].info.run_id
    assert _artifacts(client, run_id) == ["figures", "report.html"]
    assert _artifacts(client, run_id, "figures") == [f"figures/{p.name}" for p in pngs]
    copied = client.download_artifacts(run_id, "report.html", str(tmp_path / "dl"))
    assert open(copied, "rb").read() == (run / "report.html").read_bytes()
    assert client.get_run(run_id).info.status == "FINISHED"


def test_no_tracker_files_by_default(runs):
    assert not (runs["bb"] / "tensorboard").exists() and not (runs["bb"] / "mlruns").exists()
    assert json.loads((runs["bb"] / "config.json").read_text())["log"] == []


def test_sweep_trials_logged(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    from attnlab.runs import write_json
    from attnlab.sweep.plan import Trial
    from attnlab.sweep.run import log_trials

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    trials = [Trial(f"t{i}", {"N": 10.0 * (i + 1)}, None) for i in range(3)]
    for i, t in enumerate(trials):
        status = "failed" if i == 2 else "done"
        write_json(tmp_path / "trials" / t.id / "trial.json", {"status": status, "summary": {"accuracy": 0.5 + i / 10}})
    _figure(tmp_path / "trials" / "t1" / "figures" / "loss.png", (12, 20))
    (tmp_path / "trials" / "t1" / "report.html").write_text("<html>t1</html>")
    log_trials(trials, tmp_path, ("tensorboard", "mlflow"))
    assert _tensorboard_scalars(tmp_path / "tensorboard" / "t1", "accuracy") == {0: pytest.approx(0.6)}
    assert _tensorboard_images(tmp_path / "tensorboard" / "t1") == {"figures/loss": (0, (12, 20, 3))}
    assert _tensorboard_images(tmp_path / "tensorboard" / "t0") == {}
    assert not (tmp_path / "tensorboard" / "t2").exists()  # a failed trial is not logged
    _, runs = _mlflow_runs(tmp_path, monkeypatch)
    by_name = {r.info.run_name: r for r in runs}
    assert set(by_name) == {"t0", "t1"} and by_name["t0"].data.metrics["accuracy"] == pytest.approx(0.5)
    assert by_name["t1"].data.params["N"] == "20.0"
    client, _ = _mlflow_runs(tmp_path, monkeypatch)
    assert _artifacts(client, by_name["t1"].info.run_id) == ["figures", "report.html"]
    assert _artifacts(client, by_name["t0"].info.run_id) == []


def _figure(path, size: tuple[int, int]) -> None:
    """A small PNG of `size` (height, width) with a gradient, as a run's figure."""
    import numpy as np
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.linspace(0, 255, size[0] * size[1] * 3).reshape(*size, 3).astype(np.uint8)
    Image.fromarray(pixels).save(path)


def test_a_tracker_with_no_kinds_logs_no_output(tmp_path):
    from attnlab.core.tracking import Tracker

    _figure(tmp_path / "figures" / "a.png", (4, 4))
    assert Tracker((), tmp_path, "run").log_outputs(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures"]


def test_unknown_tracker_is_refused(tmp_path, capsys):
    from attnlab.cli import main

    with pytest.raises(InputError, match=r"^log: unknown tracker 'wandb'; choose from tensorboard, mlflow$"):
        resolve_config("cpu", log=["wandb"])
    with pytest.raises(SystemExit) as exc:
        main(["bb", "train", "--log", "wandb", "--out", str(tmp_path / "x")])
    assert exc.value.code == 2 and "invalid choice: 'wandb'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
