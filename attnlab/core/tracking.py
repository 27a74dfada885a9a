"""Experiment trackers as options (`--log tensorboard`, `--log mlflow`): metric records mirrored into files that
TensorBoard and MLflow read, inside the run folder, with no account and no network.

- tensorboard: event files under `<folder>/tensorboard/` (torch.utils.tensorboard's SummaryWriter);
  view with `tensorboard --logdir <folder>/tensorboard`.
- mlflow: MLflow's local file store under `<folder>/mlruns/` (experiment "attnlab", one MLflow run per `Tracker`);
  view with `mlflow ui --backend-store-uri <folder>/mlruns`.

The run folder's own metrics files stay the record; a tracker only mirrors them. Metric names are flattened:
`attn_sink` [layer][head] becomes `attn_sink/0.0` (names MLflow accepts and TensorBoard groups by prefix).
Once the run has drawn its figures and written its report, `Tracker.log_outputs(run_folder)` adds every
`figures/*.png` (TensorBoard images tagged `figures/<name>` at the last logged step; MLflow artifacts under
`figures/`) and `report.html` (an MLflow artifact) to the same tracker run.

MLflow 3 reads a file store only when `MLFLOW_ALLOW_FILE_STORE=true`: attnlab sets it while it writes; to read the
store yourself, `MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri <folder>/mlruns`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from attnlab.errors import InputError

TRACKERS = ("tensorboard", "mlflow")
EXPERIMENT = "attnlab"


def check_trackers(kinds: Any, what: str = "log") -> tuple[str, ...]:
    """`kinds` as a tuple of known tracker names (one-line error naming the field otherwise)."""
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds or ())
    for k in kinds:
        if k not in TRACKERS:
            raise InputError(f"{what}: unknown tracker {k!r}; choose from {', '.join(TRACKERS)}")
    return tuple(dict.fromkeys(kinds))


def flat_metrics(record: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics record: lists become `name/i`, grids `name/i.j` (None entries dropped)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)):
            out[key] = float(value)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[f"{key}/{i}"] = float(v)
                elif isinstance(v, list):
                    out.update({f"{key}/{i}.{j}": float(x) for j, x in enumerate(v) if isinstance(x, (int, float))})
    return {k: v for k, v in out.items() if math.isfinite(v)}


@contextmanager
def _file_store_allowed() -> Iterator[None]:
    """MLflow 3 refuses its file store unless MLFLOW_ALLOW_FILE_STORE is true (it steers users to a database).
    The file store is the point here (local, offline, no server), so the variable is set only while the tracker
    talks to MLflow and restored afterwards: the process environment is left as it was found."""
    old = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = old


class Tracker:
    """Mirror metric records of one run into the chosen trackers under `folder` (see the module docstring).

    Writers open on the first record, so a tracker with no kinds writes nothing. Use as a context manager, or
    call `close()`; `log(record, step)` flushes, so a killed run keeps what was logged.
    """

    def __init__(
        self, kinds: Any, folder: str | Path, run_name: str, params: dict[str, Any] | None = None, sub: str = ""
    ):
        """`sub`: a sub-folder of tensorboard/ for this run (a sweep's trials each get their own)."""
        self.kinds, self.folder, self.run_name, self.sub = check_trackers(kinds), Path(folder), run_name, sub
        self.params = params or {}
        self._tb: Any = None
        self._ml: tuple[Any, str] | None = None
        self._run_id: str | None = None  # the MLflow run, kept after close so that log_outputs adds to it
        self._step = 0  # the last step logged: where the figures go in TensorBoard

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close(failed=exc is not None)

    def log(self, record: dict[str, Any], step: int) -> None:
        """Log the record's numbers (flattened) at `step`."""
        values = flat_metrics({k: v for k, v in record.items() if k != "step"})
        if not values or not self.kinds:
            return
        self._step = step
        if "tensorboard" in self.kinds:
            writer = self._tensorboard()
            for key, value in values.items():
                writer.add_scalar(key, value, step)
            writer.flush()
        if "mlflow" in self.kinds:
            self._log_mlflow(values, step)

    def _tensorboard(self) -> Any:
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.folder / "tensorboard" / self.sub))
        return self._tb

    def _log_mlflow(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric, Param

        with _file_store_allowed():
            client, run_id = self._mlflow()
            now = _millis()
            client.log_batch(run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])
            if self.params:
                params = [Param(k, str(v)[:500]) for k, v in self.params.items()]
                client.log_batch(run_id, params=params)
                self.params = {}

    def _mlflow(self) -> tuple[Any, str]:
        """(client, run id), creating the file store, the experiment and the run on first use (the run of an
        earlier call is reopened: log_outputs after close adds to the run that holds the metrics)."""
        if self._ml is None:
            from mlflow.tracking import MlflowClient

            client = MlflowClient(tracking_uri=(self.folder / "mlruns").resolve().as_uri())
            if self._run_id is None:
                exp = client.get_experiment_by_name(EXPERIMENT)
                exp_id = exp.experiment_id if exp is not None else client.create_experiment(EXPERIMENT)
                self._run_id = client.create_run(exp_id, run_name=self.run_name).info.run_id
            self._ml = (client, self._run_id)
        return self._ml

    def log_outputs(self, run_folder: str | Path) -> list[Path]:
        """Log the figures (`figures/*.png`) and `report.html` of `run_folder`, once the run has written them:
        TensorBoard images at the last logged step, MLflow artifacts; returns the files logged. Closes again."""
        folder = Path(run_folder)
        figures = sorted((folder / "figures").glob("*.png")) if self.kinds else []
        report = [folder / "report.html"] if self.kinds and (folder / "report.html").is_file() else []
        if not figures and not report:
            return []
        try:
            if "tensorboard" in self.kinds and figures:
                self._log_images(figures)
            if "mlflow" in self.kinds:
                with _file_store_allowed():
                    client, run_id = self._mlflow()
                    for png in figures:
                        client.log_artifact(run_id, str(png), artifact_path="figures")
                    for page in report:
                        client.log_artifact(run_id, str(page))
        finally:
            self.close()
        return figures + report

    def _log_images(self, figures: list[Path]) -> None:
        """Each PNG as a TensorBoard image `figures/<name>` [height, width, 3] at the last logged step."""
        import numpy as np
        from PIL import Image

        writer = self._tensorboard()
        for png in figures:
            with Image.open(png) as image:
                pixels = np.asarray(image.convert("RGB"))
            writer.add_image(f"figures/{png.stem}", pixels, self._step, dataformats="HWC")
        writer.flush()

    def close(self, failed: bool = False) -> None:
        """Close the writers (an MLflow run ends FINISHED, or FAILED after an error)."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._ml is not None:
            client, run_id = self._ml
            with _file_store_allowed():
                client.set_terminated(run_id, "FAILED" if failed else "FINISHED")
            self._ml = None


def _millis() -> int:
    import time

    return int(time.time() * 1000)
