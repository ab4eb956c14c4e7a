"""fedsim from Python: the same simulator as the ``fedsim`` command, in a notebook.

A scenario is read and checked with the command line's rules, a run writes the command line's
result files, and their tables come back as polars DataFrames::

    import fedsim
    s = fedsim.Scenario.from_file("scenarios/quickstart.yaml").set("rounds", 50)
    run = fedsim.run(s, out="results/quick")
    run.metrics          # metrics.parquet, as a polars DataFrame
    run.summary          # summary.csv

Errors are Python exceptions with the command line's text: ``fedsim.ScenarioError`` names the
file, the field path, the line and what is allowed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Union

from . import _native
from ._native import FedsimError, RunError, ScenarioError

__all__ = [
    "Scenario",
    "Run",
    "run",
    "read",
    "sweep",
    "SweepResults",
    "schema",
    "describe",
    "Description",
    "FedsimError",
    "ScenarioError",
    "RunError",
]
__version__ = _native.__version__

PathLike = Union[str, "os.PathLike[str]"]


def _yaml_value(value: Any) -> str:
    """A Python value as the YAML text of a ``--set`` value (JSON is YAML)."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


class Scenario:
    """A checked scenario. Build one with :meth:`from_file`, :meth:`from_yaml` or
    :meth:`from_dict`; :meth:`set` returns a new one with one more override."""

    __slots__ = ("_inner",)

    def __init__(self, inner: "_native.Scenario"):
        self._inner = inner

    @staticmethod
    def from_file(path: PathLike, set: Iterable[str] = ()) -> "Scenario":
        """Reads a scenario file, then the overrides ``"path=value"`` (as ``--set``)."""
        return Scenario(_native.Scenario.from_file(os.fspath(path), list(set)))

    @staticmethod
    def from_yaml(text: str, set: Iterable[str] = (), name: str = "scenario.yaml") -> "Scenario":
        """Reads a scenario from YAML text; ``name`` stands for its file in messages."""
        return Scenario(_native.Scenario.from_yaml(text, list(set), name))

    @staticmethod
    def from_dict(scenario: Mapping[str, Any], name: str = "scenario.yaml") -> "Scenario":
        """Reads a scenario from a dict (as YAML would give it)."""
        return Scenario.from_yaml(json.dumps(scenario), name=name)

    def set(self, path: str, value: Any) -> "Scenario":
        """This scenario with ``path`` set to ``value``, under the ``--set`` rules: a dotted
        path, and a value read as YAML (a string as it is, anything else as JSON)."""
        return Scenario(self._inner.set(path, _yaml_value(value)))

    @property
    def resolved_yaml(self) -> str:
        """Every field with its default filled in, as ``scenario.yaml`` holds it."""
        return self._inner.resolved_yaml

    @property
    def run_id(self) -> str:
        return self._inner.run_id

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def seed(self) -> int:
        return self._inner.seed

    @property
    def notes(self) -> list:
        return self._inner.notes

    def __repr__(self) -> str:
        return repr(self._inner)


class Run:
    """A finished run's folder; its tables load when first asked for."""

    def __init__(self, path: PathLike):
        self.path = Path(path)
        if not (self.path / "summary.csv").is_file():
            raise RunError(f"{self.path}: not a finished fedsim run (it has no summary.csv)")
        self._frames: dict = {}

    def _parquet(self, name: str):
        if name not in self._frames:
            import polars

            file = self.path / f"{name}.parquet"
            self._frames[name] = polars.read_parquet(file) if file.is_file() else None
        return self._frames[name]

    @property
    def metrics(self):
        """Every evaluation: one row per round, client, split and model (metrics.parquet)."""
        return self._parquet("metrics")

    @property
    def rounds(self):
        """One row per round (rounds.parquet); ``None`` for a decentralized run."""
        return self._parquet("rounds")

    @property
    def clients(self):
        """One row per client (clients.parquet)."""
        return self._parquet("clients")

    @property
    def jobs(self):
        """One row per training job (jobs.parquet); ``None`` where a run has none."""
        return self._parquet("jobs")

    @property
    def summary(self):
        """The run's summary (summary.csv): one row per evaluated model."""
        if "summary" not in self._frames:
            import polars

            self._frames["summary"] = polars.read_csv(self.path / "summary.csv")
        return self._frames["summary"]

    @property
    def scenario(self) -> Scenario:
        """The resolved scenario the run ran (scenario.yaml)."""
        return Scenario.from_file(self.path / "scenario.yaml")

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"


def run(
    scenario: Union[Scenario, PathLike],
    out: Optional[PathLike] = None,
    threads: Optional[int] = None,
    progress: bool = False,
    force: bool = False,
    on_evaluation: Optional[Callable[[dict], None]] = None,
) -> Run:
    """Runs ``scenario`` (a :class:`Scenario` or a file) as ``fedsim run`` does and returns
    the finished :class:`Run`. ``out``: the output folder (default
    ``results/<name>/seed-<seed>``); ``threads``: trainer threads (default: the cores; results
    do not depend on it). A run killed part way resumes from its checkpoint when run again.

    ``on_evaluation`` is called with each evaluation as the run makes it, in the run's order:
    a dict of ``round``, ``time_s`` (simulated seconds) and the figures ``tracking:`` reports
    (``test/global/accuracy``, ``test/global/loss``, ...), for live plots. An exception it
    raises ends its calls and is raised once the run has ended."""
    if not isinstance(scenario, Scenario):
        scenario = Scenario.from_file(scenario)
    folder = _native.run(
        scenario._inner,
        None if out is None else os.fspath(out),
        threads,
        progress,
        force,
        on_evaluation,
    )
    return Run(folder)


class SweepResults:
    """A finished sweep's folder: each cell's :class:`Run` by its label, in the sweep's order."""

    def __init__(self, path: PathLike, cells: Iterable):
        self.path = Path(path)
        self.runs = {label: Run(folder) for label, folder in cells}

    @property
    def summary(self):
        """Every cell's summary (summary.csv), one below the other, with its ``cell`` label."""
        import polars

        return polars.concat(
            [
                run.summary.with_columns(polars.lit(label).alias("cell"))
                for label, run in self.runs.items()
            ],
            how="diagonal_relaxed",
        )

    def __repr__(self) -> str:
        return f"SweepResults({str(self.path)!r}, {len(self.runs)} cells)"


def sweep(
    path: PathLike,
    out: Optional[PathLike] = None,
    jobs: int = 1,
    progress: bool = False,
    force: bool = False,
) -> SweepResults:
    """Runs the sweep file ``path`` as ``fedsim sweep`` does (default output folder
    ``results/<sweep name>``; ``jobs`` cells at once). Finished cells are kept, a cell cut
    short resumes from its checkpoint; a cell that fails raises :class:`RunError` once the
    others have run."""
    folder, cells = _native.sweep(
        os.fspath(path), None if out is None else os.fspath(out), jobs, progress, force
    )
    return SweepResults(folder, cells)


def read(path: PathLike) -> Run:
    """A finished run's folder, as written by ``fedsim run``, a sweep cell or :func:`run`."""
    return Run(path)


class Description:
    """What ``fedsim describe`` says of a scenario before anything trains. ``str()`` of it is
    the command's text; ``notes`` what it says on standard error; ``clients``, ``features`` and
    ``classes`` the data's figures; ``splits`` one row per split (rows, sizes per client, label
    shares) as a polars DataFrame."""

    def __init__(self, described: dict):
        self.text: str = described["text"]
        self.notes: list = described["notes"]
        self.clients: int = described["clients"]
        self.features: int = described["features"]
        self.classes: int = described["classes"]
        self._splits: list = described["splits"]

    @property
    def splits(self):
        import polars

        return polars.DataFrame(self._splits)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


def describe(scenario: Union[Scenario, PathLike]) -> Description:
    """Describes ``scenario`` (a :class:`Scenario` or a file) as ``fedsim describe`` does: its
    data built and its run decided (model, availability, compression, adversary, privacy),
    nothing trained."""
    if not isinstance(scenario, Scenario):
        scenario = Scenario.from_file(scenario)
    return Description(_native.describe(scenario._inner))


def schema() -> dict:
    """The JSON Schema of scenario files (``fedsim schema``)."""
    return json.loads(_native.schema())
