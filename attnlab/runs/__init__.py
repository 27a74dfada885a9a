"""The run layer: run folders that never lose data (the run layer every command writes through).

A run folder holds `config.json` (the resolved config), `manifest.json` (command, argv, seed, versions, git SHA,
config hash), metrics (`metrics.jsonl` or JSON/CSV tables), arrays (`.npy`/safetensors), `figures/` and
`report.html`. Rules, enforced by `open_run`:

- a new run never writes into a non-empty folder; `mode="resume"` continues a run of the same command and
  `mode="overwrite"` replaces an earlier attnlab run (never an arbitrary folder);
- a lock file (`.attnlab.lock`, holding the owner's pid) keeps two processes out of one folder;
- every file is written atomically (temporary file, then rename), and a JSON-lines file whose last line was cut
  by a `kill -9` is read without that line;
- a command that fails before writing anything leaves no empty folder behind (nor the parents it created), and
  a new run that a full disk stops leaves nothing behind unless it saved a point to continue from;
- `--overwrite` sets the earlier run aside in `.<name>.replaced-<pid>` until the new run ends; one that a `kill -9`
  left there is put back by the next command (`recover_replaced`).

Modules: `io` (atomic files and JSON-lines readers), `folder` (a run folder's life: lock, set-aside, recover,
open), `provenance` (manifest), `types` (`RunResult`), `configs` (frozen configs from JSON and argparse),
`resume` (continuing a stopped run), `results` (`load_run`), `budget` (memory and time refusals). The names
below are the ones the studies use, re-exported.
"""

from attnlab.errors import InputError
from attnlab.runs.folder import (
    LOCK_NAME,
    MODES,
    RUN_STATUSES,
    RunDir,
    check_out_folder,
    open_run,
    recover_replaced,
    run_status,
)
from attnlab.runs.io import (
    STEPPED,
    WriteError,
    atomic_folder,
    default_run_dir,
    read_json,
    read_jsonl,
    read_metrics,
    save_npy,
    to_jsonable,
    write_bytes,
    write_failed,
    write_json,
    write_jsonl,
    write_text,
)
from attnlab.runs.provenance import config_hash, device_info, environment_manifest, git_sha
from attnlab.runs.types import RunResult, Tables, frame

__all__ = [
    "LOCK_NAME", "MODES", "RUN_STATUSES", "STEPPED", "InputError", "RunDir", "RunResult", "Tables", "WriteError",
    "atomic_folder", "check_out_folder", "config_hash", "default_run_dir", "device_info", "environment_manifest",
    "frame", "git_sha", "open_run", "read_json", "read_jsonl", "read_metrics", "recover_replaced", "run_status",
    "save_npy", "to_jsonable", "write_bytes", "write_failed", "write_json", "write_jsonl", "write_text",
]  # fmt: skip
