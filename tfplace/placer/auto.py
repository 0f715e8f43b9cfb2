"""The ``auto`` placer: the fastest placement the simulator finds that fits in memory.

Each placer of this package decides with its own model of the step (a static memory estimate that
keeps every output for the whole step, a schedule without link contention, a cut that ignores
memory); every placement is then scored by one simulator (:func:`tfplace.simulator.simulate`).
``auto`` makes that simulator the judge:

1. **Portfolio.** The graph is placed by registered placers, METIS, one device, m-ETF and
   Celeritas (:data:`ALWAYS`) and, on graphs of at most :data:`SMALL_GRAPH_OPS` ops, every other
   one; then
   by METIS variants on the contracted graph of :mod:`tfplace.placer.metis`: ``2 .. m`` parts,
   vertex weights from compute or from the static memory (pymetis balances one of them), a loose
   imbalance (:data:`VARIANT_IMBALANCE`) and several seeds. Which cut leaves the devices running
   in parallel without waiting for transfers is not visible to METIS; it varies from seed to seed,
   and the simulator tells.
2. **Judging.** A candidate *fits* when its simulated peak memory stays within ``1 - margin`` of
   every device's memory (the simulator's memory model is approximate: 5% by default).
   Candidates rank by tier, fits first, then those that only fit the bare memory (no
   out-of-memory event), then those out of memory by the fewest bytes over capacity in all;
   within a tier by the simulated step. Ties go to the earlier candidate.
3. **Local improvement.** From the best candidate, blocks of co-location groups (a finer METIS
   partition, :data:`BLOCKS_PER_DEVICE` parts per device, split by the device each group is on)
   move to another target device, the blocks exchanging the most bytes with that device first; a
   move is kept when it ranks better. It stops when the budget is spent or no move ranks better.

The budget: simulating a step costs about 8 us per op, more than placing it, so ``auto`` runs
``budget // ops`` simulations (between :data:`MIN_SIMULATIONS` and :data:`MAX_SIMULATIONS`): the
portfolio's first, local improvement's with what is left. A placement simulated before, or one that
cannot beat the best fitting placement (its busiest device's compute alone takes longer than that
step), is not simulated. The portfolio comes first because, on the experiment's graphs, another
METIS seed gained more per simulation than a move did (on the NMT 3.66 s against 4.02 s; moves
gained at most 0.01%), while graphs small enough to simulate every candidate leave simulations
for moves (Inception V3 2.855 s -> 2.830 s). On graphs so large that fewer simulations than
:data:`ALWAYS` placers are allowed, the later ones are left out. Everything is deterministic: the
portfolio's order, METIS's seeds and the moves' order are fixed, and the budget counts simulations,
not seconds. The one clock involved is m-SCT's LP time limit (:func:`tfplace.placer.etf.m_sct`),
in the portfolio of small graphs: past it, that candidate is m-ETF's placement.

4. **Split plans.** On a cost graph that records what splitting needs (a batch size and each op's
   inputs, schema version 3: :func:`tfplace.placer.split_plans.records_split_fields`) and more than
   one target device, the split placers of :data:`SPLIT_CANDIDATES` (data parallelism, what
   ``tf.distribute.MirroredStrategy`` does, and the layer-wise search) make a plan each, which
   :func:`tfplace.split.expand.simulate_plan` simulates with its pieces, joins and all-reduces on the
   same simulator; each is ranked as the placements are (tiers, then step), and the best of all
   wins, the whole-op placement on a tie. So the default is never slower by the simulator than data
   parallelism or one device, and never out of memory when one of them fits. A split winner is
   returned as the split placer's :class:`~tfplace.core.placement.Placement` (its ``split_plan``:
   ``apply`` rewrites a graph into the pieces), named ``auto (<placer> split plan)``, unless the
   ``runnable`` check (TensorFlow's rewrite, when the caller has the graph) refuses it. These plans are
   outside the budget, and made first: when the best of them that fits (and runs) is faster than
   the graph's critical path of compute (``details["whole_op_bound"]``), no placement of whole ops
   can rank better (each op runs whole after its inputs; transfers only add), so none is searched
   (``whole_op_winner`` says so). That skips the portfolio's simulations where splitting wins by far
   (Inception V3, Tensor Holography), with the same winner.

``details``: ``winner`` (the candidate placed, with ``+ n moves`` when local improvement changed
it, or the split placer) and its ``tier``, ``candidates`` (each portfolio candidate's simulated step, peak memory per
device and tier, or why it was not simulated; split plans with ``"split": True``), ``simulations``, ``moves`` (tried and kept) and
``margin``; with ``warning`` when the placement runs out of memory in the simulator; and
``memory_model = "simulated"``: memory was judged by the simulator, so the static estimate's
overcommits (:mod:`tfplace.placer.capacity`) do not describe this placement.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from tfplace.core.costgraph import CostGraph
from tfplace.core.devices import DeviceSet
from tfplace.core.indexed import IndexedGraph, index_graph
from tfplace.core.orders import bottom_levels
from tfplace.core.placement import Placement
from tfplace.core.progress import Progress
from tfplace.core.transfer import TransferModel
from tfplace.placer import PLACERS, place_whole_ops, placer_function
from tfplace.placer.base import PlacerOutput
from tfplace.placer.ledger import MemoryLedger
from tfplace.placer.metis import contracted_graph, group_weights, partition
from tfplace.placer.split_plans import records_split_fields
from tfplace.simulator import simulate
from tfplace.split.expand import simulate_plan
from tfplace.split.plan import SplitPlan

__all__ = ["ALWAYS", "DEFAULT_BUDGET", "DEFAULT_MARGIN", "SPLIT_CANDIDATES", "auto", "whole_op_search"]

#: Share of each device's memory the simulated peak may not use, by default.
DEFAULT_MARGIN = 0.05
#: Op-simulations (ops times simulated steps) ``auto`` spends, by default: about 4 s.
DEFAULT_BUDGET = 500_000
#: Bounds of the simulations, whatever the budget and the graph's size.
MIN_SIMULATIONS = 2
MAX_SIMULATIONS = 64
#: Registered placers always in the portfolio, in this order.
ALWAYS = ("metis", "single", "m_etf", "celeritas")
#: Graphs of at most this many ops get every registered placer in the portfolio.
SMALL_GRAPH_OPS = 5_000
#: METIS variants: imbalance (a loose balance cuts fewer bytes) and seeds.
VARIANT_IMBALANCE = 0.3
VARIANT_SEEDS = (1, 2, 3, 4)
#: Parts per target device of the finer partition local improvement moves, and its METIS seed.
BLOCKS_PER_DEVICE = 4
BLOCKS_SEED = 1

#: Split placers (:mod:`tfplace.placer.split_plans`) whose plans compete with the placements.
SPLIT_CANDIDATES = ("data_parallel", "layerwise")
#: Why the whole-op search is skipped when a split plan that fits beats its bound.
WHOLE_OP_BOUND = "a split plan that fits is faster than the graph's critical path of compute"

FITS, NO_MARGIN, OUT_OF_MEMORY = 0, 1, 2
_TIERS = ("fits", "fits without the margin", "out of memory")

Contracted = tuple[np.ndarray, Any, np.ndarray]


@dataclass(frozen=True)
class Scored:
    """A simulated candidate.

    Attributes
    ----------
    name : str
    op_devices : numpy.ndarray
        Device of each op (index into ``devices.all_devices``).
    step_time : float
        Simulated seconds of the step.
    peak_memory : numpy.ndarray
        Simulated peak bytes of each device.
    tier : int
        :data:`FITS`, :data:`NO_MARGIN` or :data:`OUT_OF_MEMORY`.
    excess : int
        Bytes over capacity, summed over the devices (``0`` unless out of memory).
    """

    name: str
    op_devices: np.ndarray
    step_time: float
    peak_memory: np.ndarray
    tier: int
    excess: int

    @property
    def rank(self) -> tuple[int, int, float]:
        """Lower is better: tier, bytes over capacity, step."""
        return self.tier, self.excess, self.step_time


class _Judge:
    """Simulates candidates within a budget and keeps the best ranked one."""

    def __init__(self, graph: IndexedGraph, devices: DeviceSet, margin: float, simulations: int):
        self.graph, self.devices = graph, devices
        self.memory = _MemoryLimits(devices, margin)
        self.left = simulations
        self.simulated = 0
        self.best: Scored | None = None
        self.records: list[dict[str, Any]] = []
        self._seen: set[bytes] = set()
        self.progress: Progress | None = None

    def consider(self, name: str, op_devices: np.ndarray, *, record: bool = True) -> Scored | None:
        """Simulate ``op_devices`` unless it was seen, cannot win or the budget is spent; returns
        its score when it ranks better than every placement before it. ``record`` keeps its
        outcome for ``details["candidates"]``."""
        key = hashlib.blake2b(op_devices.tobytes(), digest_size=16).digest()
        reason = self._skip_reason(key, op_devices)
        if reason is not None:
            if record:
                self.records.append({"name": name, "skipped": reason})
            return None
        self._seen.add(key)
        scored = self._simulate(name, op_devices)
        if record:
            self.records.append(self._record(scored))
        if self.best is not None and scored.rank >= self.best.rank:
            return None
        self.best = scored
        return scored

    def _skip_reason(self, key: bytes, op_devices: np.ndarray) -> str | None:
        if key in self._seen:
            return "the placement of an earlier candidate"
        if self.left <= 0:
            return "the simulation budget is spent"
        best = self.best
        if best is not None and best.tier == FITS:
            busiest = float(np.bincount(op_devices, weights=self.graph.compute).max(initial=0.0))
            if busiest >= best.step_time:
                return f"its busiest device computes {busiest:.6g} s, not faster than {best.name}"
        return None

    def _simulate(self, name: str, op_devices: np.ndarray) -> Scored:
        self.left -= 1
        self.simulated += 1
        result = simulate(self.graph, op_devices, self.devices)
        peak = result.peak_memory
        tier, excess = self.memory.tier(peak)
        if self.progress is not None:
            self.progress.advance(f"{name}: {result.makespan:.4g} s, {_TIERS[tier]}")
        return Scored(name, op_devices, float(result.makespan), peak, tier, excess)

    def _record(self, scored: Scored) -> dict[str, Any]:
        names = [d.name for d in self.devices.all_devices]
        return {
            "name": scored.name,
            "step_time": scored.step_time,
            "peak_memory": {names[d]: int(p) for d, p in enumerate(scored.peak_memory) if p},
            "tier": _TIERS[scored.tier],
        }


class _MemoryLimits:
    """Which tier a simulated peak memory per device falls in, and by how many bytes it overflows."""

    def __init__(self, devices: DeviceSet, margin: float):
        self.names = [d.name for d in devices.all_devices]
        self.capacity = np.array([d.memory for d in devices.all_devices], dtype=np.int64)
        self.limit = self.capacity * (1.0 - margin)

    def tier(self, peak: np.ndarray) -> tuple[int, int]:
        """``(tier, bytes over capacity summed over the devices)`` of ``peak`` (one per device)."""
        excess = int(np.maximum(peak - self.capacity, 0).sum())
        return (OUT_OF_MEMORY if excess else FITS if (peak <= self.limit).all() else NO_MARGIN), excess

    def scored(self, name: str, step_time: float, peak_memory: Mapping[str, int]) -> Scored:
        """A candidate simulated elsewhere, from its step and peak bytes by device name."""
        peak = np.array([peak_memory.get(device, 0) for device in self.names], dtype=np.int64)
        tier, excess = self.tier(peak)
        return Scored(name, np.zeros(0, dtype=np.int64), step_time, peak, tier, excess)


def auto(
    graph: CostGraph,
    devices: DeviceSet,
    *,
    simulate: bool = True,
    coplace_gradients: bool = True,
    splits: bool = True,
    margin: float = DEFAULT_MARGIN,
    budget: int = DEFAULT_BUDGET,
    memory_model: str = "liveness",
    runnable: Callable[[SplitPlan], str | None] | None = None,
) -> Placement:
    """``placer="auto"``: the best ranked of the whole-op placements (:func:`whole_op_search`) and,
    with ``splits`` on a graph that records what splitting needs, of the split plans (module
    docstring, step 4).

    Parameters
    ----------
    graph : CostGraph
    devices : DeviceSet
    simulate, coplace_gradients
        As :func:`tfplace.placer.place_cost_graph`; ``auto`` simulates its winner whenever split
        plans compete, so its ``step_time`` is then set either way.
    splits : bool
        Let split plans compete (``False``: the best placement of whole ops).
    margin, budget, memory_model
        As :func:`whole_op_search`.
    runnable : callable, optional
        Why a split plan cannot run (``None`` when it can): TensorFlow's rewrite asked on the user's
        graph (:func:`tfplace.api.split_rewrite_check`, which :func:`tfplace.api.place` and
        ``tfplace place --graph`` pass). A split plan it refuses does not win; its record says why.

    Returns
    -------
    Placement
        With ``split_plan`` when a split plan won; ``details`` as the module docstring says.
    """
    _check_options(margin, budget)
    start = time.perf_counter()
    splitting = splits and len(devices) > 1 and records_split_fields(graph)
    total = _simulations(len(graph), budget) + (len(SPLIT_CANDIDATES) if splitting else 0)
    with Progress("auto: simulations", total) as progress:
        search = partial(
            whole_op_search, margin=margin, budget=budget, memory_model=memory_model, progress=progress
        )
        place = partial(
            place_whole_ops,
            graph,
            devices,
            search,
            "auto",
            simulate=simulate or splitting,
            coplace_gradients=coplace_gradients,
        )
        if not splitting:
            return place()
        candidates = _split_candidates(graph, devices, margin, progress)
        records = _split_records(candidates)
        bound = _MemoryLimits(devices, margin).scored(WHOLE_OP_BOUND, _critical_path_seconds(graph), {})
        winner = _first_runnable(candidates, bound, runnable, records)
        if winner is not None:  # no placement of whole ops can rank better: none is searched
            chosen = _split_winner(winner, None, records, start)
        else:
            chosen = _best_of(place(), candidates, records, margin, start, runnable)
        chosen.details["whole_op_bound"] = bound.step_time
        return chosen


def _split_candidates(
    graph: CostGraph, devices: DeviceSet, margin: float, progress: Progress
) -> list[tuple[Scored, Placement, Any]]:
    """Each split placer's plan, simulated with its pieces and scored: ``(score, placement, result)``."""
    memory = _MemoryLimits(devices, margin)
    candidates = []
    for name in SPLIT_CANDIDATES:
        placement = placer_function(name)(graph, devices, simulate=False)  # type: ignore[call-arg,arg-type]
        plan = placement.split_plan  # type: ignore[attr-defined]
        result, _ = simulate_plan(graph, plan)
        scored = memory.scored(name, float(result.makespan), plan.peak_memory)
        progress.advance(f"{name} (split plan): {scored.step_time:.4g} s, {_TIERS[scored.tier]}")
        candidates.append((scored, placement, result))
    return candidates  # type: ignore[return-value]


def _split_records(candidates: list[tuple[Scored, Placement, Any]]) -> dict[str, dict[str, Any]]:
    """Each split candidate's record for ``details["candidates"]``, by name."""
    return {
        scored.name: {
            "name": scored.name,
            "split": True,
            "step_time": scored.step_time,
            "peak_memory": {k: v for k, v in placement.split_plan.peak_memory.items() if v},
            "tier": _TIERS[scored.tier],
        }
        for scored, placement, _ in candidates
    }


def _critical_path_seconds(graph: CostGraph) -> float:
    """The longest chain of compute in ``graph``: no placement of whole ops takes a shorter step in
    the simulator (each op runs whole, after its inputs; transfers only add)."""
    free = TransferModel(0.0, 0.0, name="no transfers")
    return float(bottom_levels(index_graph(graph, free)).max(initial=0.0))


def _first_runnable(
    candidates: list[tuple[Scored, Placement, Any]],
    rival: Scored,
    runnable: Callable[[SplitPlan], str | None] | None,
    records: dict[str, dict[str, Any]],
) -> tuple[Scored, Placement, Any] | None:
    """The best ranked split candidate that ranks better than ``rival`` and that ``runnable`` does
    not refuse (a refusal is kept in its record and not asked again); ``None`` when there is none."""
    for candidate in sorted(
        candidates, key=lambda candidate: candidate[0].rank
    ):  # stable: ties keep the order
        if candidate[0].rank >= rival.rank:
            return None
        record = records[candidate[0].name]
        if "refused" not in record and runnable is not None:
            refusal = runnable(candidate[1].split_plan)
            if refusal is not None:
                record["refused"] = refusal
        if "refused" not in record:
            return candidate
    return None


def _best_of(
    whole: Placement,
    splits: list[tuple[Scored, Placement, Any]],
    records: dict[str, dict[str, Any]],
    margin: float,
    start: float,
    runnable: Callable[[SplitPlan], str | None] | None,
) -> Placement:
    """The whole-op placement ``whole`` or the best ranked split plan that ranks better and that
    ``runnable`` does not refuse (the placement on a tie), with every candidate in
    ``details["candidates"]`` and the time of the whole decision."""
    memory = _MemoryLimits(whole.devices, margin)
    assert whole.step_time is not None, "auto simulates its placement when split plans compete"
    winner = _first_runnable(
        splits, memory.scored("whole ops", whole.step_time, whole.peak_memory), runnable, records
    )
    if winner is None:
        details = {**whole.details, "candidates": [*whole.details.get("candidates", ()), *records.values()]}
        return replace(whole, details=details, placement_seconds=time.perf_counter() - start)
    return _split_winner(winner, whole, records, start)


def _split_winner(
    winner: tuple[Scored, Placement, Any],
    whole: Placement | None,
    records: dict[str, dict[str, Any]],
    start: float,
) -> Placement:
    """The split candidate ``winner`` as ``auto``'s placement, beside the whole-op placement
    ``whole`` (``None``: not searched, as none could rank better than the critical path)."""
    scored, placement, result = winner
    name = f"auto ({scored.name} split plan)"
    plan = placement.split_plan
    seconds = time.perf_counter() - start
    plan.placer, plan.search_seconds = name, seconds
    if whole is None:
        details: dict[str, Any] = {
            "candidates": list(records.values()),
            "memory_model": "simulated",
            "whole_op_winner": f"not searched: {WHOLE_OP_BOUND}",
        }
    else:
        details = {**whole.details, "candidates": [*whole.details.get("candidates", ()), *records.values()]}
        details.update(whole_op_winner=whole.details.get("winner"), whole_op_step_time=whole.step_time)
    details.update(winner=scored.name, tier=_TIERS[scored.tier])
    details.pop("warning", None)
    if scored.tier == OUT_OF_MEMORY:
        details["warning"] = _out_of_memory_warning(scored)
    return replace(placement, placer=name, details=details, placement_seconds=seconds).with_simulation(result)


def _check_options(margin: float, budget: int) -> None:
    if not 0 <= margin < 1:
        raise ValueError(f"auto's memory margin must be in [0, 1), got {margin}")
    if budget <= 0:
        raise ValueError(f"auto's budget must be > 0 op-simulations, got {budget}")


def _simulations(ops: int, budget: int) -> int:
    """Simulated steps of whole-op placements ``budget`` allows on a graph of ``ops`` ops."""
    return min(MAX_SIMULATIONS, max(MIN_SIMULATIONS, budget // max(ops, 1)))


auto.splits_ops = True  # type: ignore[attr-defined]


def whole_op_search(
    graph: IndexedGraph,
    devices: DeviceSet,
    *,
    margin: float = DEFAULT_MARGIN,
    budget: int = DEFAULT_BUDGET,
    memory_model: str = "liveness",
    progress: Progress | None = None,
) -> PlacerOutput:
    """The best ranked of the portfolio's placements after local improvement (module docstring,
    steps 1-3).

    Parameters
    ----------
    graph : IndexedGraph
    devices : DeviceSet
    margin : float
        Share of each device's memory the simulated peak must leave free to fit, in ``[0, 1)``.
    budget : int
        Op-simulations to spend (``ops * simulations``), > 0.
    memory_model : str
        The memory model of the portfolio's registered placers (:mod:`tfplace.placer.ledger`).
    progress : Progress, optional
        Where each simulation is shown (its own progress line by default).

    Returns
    -------
    PlacerOutput
        ``details`` as the module docstring says.
    """
    _check_options(margin, budget)
    simulations = _simulations(len(graph), budget)
    judge = _Judge(graph, devices, margin, simulations)
    contracted = contracted_graph(graph)
    template = MemoryLedger(graph, devices)
    with (
        nullcontext(progress) if progress is not None else Progress("auto: simulations", simulations) as shown
    ):
        judge.progress = shown
        for name, place in _candidates(template, contracted, memory_model):
            if judge.left <= 0:
                break
            judge.consider(name, place())
        moves = _improve(judge, template, contracted)
    best = judge.best
    assert best is not None, "the portfolio simulates its first candidate"
    return PlacerOutput(
        op_devices=best.op_devices,
        ledger=_ledger(template, _group_devices(graph, best.op_devices)),
        estimated_makespan=best.step_time,
        details={
            "winner": best.name,
            "tier": _TIERS[best.tier],
            "candidates": judge.records,
            "simulations": judge.simulated,
            "moves": moves,
            "margin": margin,
            "memory_model": "simulated",
            **({"warning": _out_of_memory_warning(best)} if best.tier == OUT_OF_MEMORY else {}),
        },
    )


def _candidates(
    template: MemoryLedger, contracted: Contracted, memory_model: str
) -> Iterator[tuple[str, Callable[[], np.ndarray]]]:
    """The portfolio in order: ``(name, function returning op devices)``, placed only when asked;
    ``template`` is an empty ledger of the graph and devices."""
    graph, devices = template.graph, template.devices
    for name in _registered(len(graph)):
        yield name, partial(_registered_placement, name, graph, devices, memory_model)
    vertex_weights, adjacency, edge_weights = contracted
    balances = {"compute": vertex_weights, "memory": group_weights(graph, graph.memory)}
    for seed in VARIANT_SEEDS:
        for balance, weights in balances.items():
            for parts in range(2, len(devices) + 1):
                cut = partial(
                    partition, weights, adjacency, edge_weights, parts, imbalance=VARIANT_IMBALANCE, seed=seed
                )
                name = f"metis(parts={parts}, balance={balance}, seed={seed})"
                yield name, partial(_partition_placement, template, cut)


def _registered(ops: int) -> list[str]:
    """Registered placers of the portfolio: :data:`ALWAYS`, then the others that place whole ops on
    small graphs."""
    others = [p for p in PLACERS if p not in ALWAYS and not getattr(placer_function(p), "splits_ops", False)]
    others = others if ops <= SMALL_GRAPH_OPS else []
    return [*ALWAYS, *others]


def _registered_placement(
    name: str, graph: IndexedGraph, devices: DeviceSet, memory_model: str
) -> np.ndarray:
    return placer_function(name)(graph, devices, memory_model=memory_model).op_devices


def _partition_placement(template: MemoryLedger, cut: Callable[[], np.ndarray]) -> np.ndarray:
    """Part ``k`` of the groups on target ``k``, through the ledger (which sends a group that
    cannot run there where it can)."""
    return _ledger(template, cut()).op_devices()


def _ledger(template: MemoryLedger, group_devices: np.ndarray) -> MemoryLedger:
    """A ledger with group ``g`` committed to device ``group_devices[g]``."""
    ledger = template.blank()
    for device in np.unique(group_devices).tolist():
        ledger.commit(np.flatnonzero(group_devices == device).tolist(), device)
    return ledger


def _group_devices(graph: IndexedGraph, op_devices: np.ndarray) -> np.ndarray:
    """Device of each co-location group (every member is on it)."""
    first = np.array([members[0] for members in graph.group_members], dtype=np.int64)
    return op_devices[first] if len(first) else np.zeros(0, dtype=np.int64)


def _improve(judge: _Judge, template: MemoryLedger, contracted: Contracted) -> dict[str, int]:
    """Local improvement (module docstring, step 3) of the judge's best placement; returns the
    moves ``tried`` (simulated, or skipped as seen or hopeless) and ``kept``."""
    moves = {"tried": 0, "kept": 0}
    best = judge.best
    assert best is not None
    if len(contracted[0]) < 2 or template.num_targets < 2:
        return moves
    blocks = _Blocks.of(template, contracted)
    origin, graph = best.name, template.graph
    while judge.left > 0:
        name = f"{origin} + {moves['kept'] + 1} move{'s' if moves['kept'] else ''}"
        better = _first_better_move(judge, graph, blocks, _group_devices(graph, best.op_devices), name, moves)
        if better is None:
            break
        best = better
        moves["kept"] += 1
    return moves


def _first_better_move(
    judge: _Judge, graph: IndexedGraph, blocks: _Blocks, placed: np.ndarray, name: str, moves: dict[str, int]
) -> Scored | None:
    """Try the moves of the groups ``placed`` on their devices in order, counting each in
    ``moves["tried"]``, until one ranks best (its score) or none is left in the budget (``None``)."""
    for members, device in blocks.moves(placed):
        if judge.left <= 0:
            return None
        trial = placed.copy()
        trial[members] = device
        moves["tried"] += 1
        better = judge.consider(name, trial[graph.group], record=False)
        if better is not None:
            return better
    return None


@dataclass(frozen=True)
class _Blocks:
    """What local improvement moves: blocks of a finer partition of the groups, cut by device.

    ``fine`` is each group's part, ``allowed[g, d]`` whether group ``g`` can run on target ``d``,
    ``src``, ``dst`` and ``weights`` the contracted graph's edges (both directions) and bytes.
    """

    fine: np.ndarray
    allowed: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    weights: np.ndarray

    @classmethod
    def of(cls, template: MemoryLedger, contracted: Contracted) -> _Blocks:
        """:data:`BLOCKS_PER_DEVICE` parts per target, each of about as many groups (a group's
        compute can exceed a block's share, which METIS cannot balance)."""
        vertex_weights, adjacency, edge_weights = contracted
        groups, targets = len(vertex_weights), template.num_targets
        fine = partition(
            np.ones_like(vertex_weights),
            adjacency,
            edge_weights,
            min(BLOCKS_PER_DEVICE * targets, groups),
            imbalance=VARIANT_IMBALANCE,
            seed=BLOCKS_SEED,
        )
        allowed = np.zeros((groups, targets), dtype=bool)
        for group, devices in enumerate(template.group_targets):
            allowed[group, list(devices)] = True
        starts = np.asarray(adjacency.adj_starts, dtype=np.int64)
        src = np.repeat(np.arange(groups), np.diff(starts))
        return cls(fine, allowed, src, np.asarray(adjacency.adjacent, dtype=np.int64), edge_weights)

    def moves(self, placed: np.ndarray) -> Iterator[tuple[np.ndarray, int]]:
        """``(groups, target)``: each block on a target device to each other target, by decreasing
        bytes it would stop sending (its edge weight to the target minus that to its own device);
        only the groups that can run on the target move."""
        targets = self.allowed.shape[1]
        block_ids, block = np.unique(placed * (int(self.fine.max()) + 1) + self.fine, return_inverse=True)
        block_device = np.zeros(len(block_ids), dtype=np.int64)
        block_device[block] = placed
        flows = np.zeros((len(block_ids), max(targets, int(placed.max()) + 1)))
        np.add.at(flows, (block[self.src], placed[self.dst]), self.weights)
        ranked = sorted(
            (flows[b, own] - flows[b, device], b, device)
            for b, own in enumerate(block_device.tolist())
            if own < targets
            for device in range(targets)
            if device != own
        )
        for _, b, device in ranked:
            members = np.flatnonzero((block == b) & self.allowed[:, device])
            if len(members):
                yield members, device


def _out_of_memory_warning(best: Scored) -> str:
    return (
        f"no candidate placement fits in memory in the simulator; the placement chosen ({best.name}) "
        f"exceeds device memory by {best.excess:,} bytes in all"
    )
