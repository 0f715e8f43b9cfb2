"""Boundary refinement of a cluster placement, judged by the executor replay.

Order-Place fills the devices in the clusters' order, so where one device's clusters end and the
next device's begin is wherever its memory ran out, not where the step is cheapest to cut. This
pass moves the clusters next to such a boundary across it, in the spirit of Kernighan-Lin/FM
refinement on the fused graph (Celeritas section 5 places the coarse graph; this refines that
placement): a run of ``k`` consecutive clusters (``k = 1, 2, 4, ...``, all on one side of a
boundary in the coarse graph's CPD-TOPO order) goes to the device on the other side, with the
co-location groups it decides (those whose first op in that order it holds: a forward op's
gradient ops move with it). A move is kept when every device's replayed peak still fits and the
replay's makespan (:func:`~tfplace.placer.executor_order.executor_order`, the list schedule the
simulator runs) drops; the first such move is kept and the search starts again, until no move
helps or :data:`MAX_MOVES` moves were tried. A trial costs one executor order over the ops, a
faster one also the memory replay of that order
(:meth:`~tfplace.placer.ledger.MemoryLedger.replay_groups`): together the replay that checks a
final placement's memory anyway.

Then parts of clusters move to any target device: each cluster's deciding groups, in their order,
are cut into :data:`CLUSTER_PARTS` runs, and each run in turn goes to each other target that can
run it, the move kept on the same terms. A boundary move only shifts where the fill ends; a part
move can put a branch on a device of its own, where it runs beside the branches it forks from and
joins (an Inception block's 1x1 convolution beside its 3x3 and 5x5 towers), or give a filled device
work back. The parts are visited round and round, each from the placement the last kept move left,
until a whole round keeps none or ``PART_MOVE_BUDGET // ops`` moves were tried
(:data:`PART_MOVE_BUDGET`).

A placement on one device has no boundary to refine, yet its step can be shorter: the device runs
every op one after another (its step is the sum of their compute), and side work that no op waits
for soon (a variable's read and update, a batch norm's moving averages, shape arithmetic) can run on
an idle device meanwhile. :func:`offload_side_work` moves such co-location groups, those whose
outputs still arrive in time on the busy device, to one idle device: in the one-device executor
order each op ``v`` started at ``s_v``; a group alone on the idle device would finish ``v`` at
``f'_v`` (its inputs from the busy device arriving a transfer after their producers ended, the
group's own ops one after another), and each tensor it sends back must arrive by its consumer's
start less the compute moved away (the busy device runs that much earlier at most). The groups
with the most such slack, as many as their slack allows, move together; the replay judges the
move, halved while it is not faster. Each trial is one executor order over the ops, so the trials
are bounded by ``OFFLOAD_BUDGET // ops`` (:data:`OFFLOAD_BUDGET`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from tfplace.core.indexed import IndexedGraph
from tfplace.core.orders import cpd_topo_order
from tfplace.core.transfer import TransferModel
from tfplace.placer.executor_order import ExecutorSchedule, executor_order
from tfplace.placer.ledger import MemoryLedger, Replay

__all__ = [
    "CLUSTER_PARTS",
    "MAX_MOVES",
    "OFFLOAD_BUDGET",
    "PART_MOVE_BUDGET",
    "offload_side_work",
    "refine_boundaries",
]

#: Boundary moves the refinement tries at most (each one executor order over the ops).
MAX_MOVES = 12

#: Runs each cluster's deciding groups are cut into for moves to any target device.
CLUSTER_PARTS = 8

#: Part moves the refinement tries at most, times the graph's ops (a trial is one executor order over
#: the ops): 304 trials on Inception V3 (4,277 ops, about 300 parts and targets to visit once),
#: 52 on the NMT (24,819 ops).
PART_MOVE_BUDGET = 1_300_000

#: Op replays the offload of a one-device placement's side work may spend (ordering the one-device
#: step once, then one replay per trial): 15 trials on Tensor Holography (1,815 ops) and none on
#: graphs of more than 15,000 ops, where a trial (an executor order and a memory replay over every
#: op: about 0.35 s of CPU at 36k ops, 1.9 s at 200k) costs more than the placement's speed targets
#: (1 s at 36k, 5 s at 200k) leave (the moved groups hold sources, variables, so a replay restarted
#: at the first moved op would still replay the whole step).
OFFLOAD_BUDGET = 30_000


def refine_boundaries(
    ledger: MemoryLedger,
    coarse: IndexedGraph,
    members: Sequence[Sequence[int]],
    cluster_devices: Sequence[int],
) -> MemoryLedger | None:
    """The refined placement of the finished liveness ``ledger`` (module docstring), whose cluster
    ``c`` (ops ``members[c]``) went to ``cluster_devices[c]``; ``None`` when no move helps."""
    order = cpd_topo_order(coarse)
    deciding = _deciding_groups(ledger, order, members, cluster_devices)
    devices = [cluster_devices[c] for c in order]
    best_groups, best = ledger.group_device.copy(), ledger.replayed()
    tried, improved = 0, False
    while tried < MAX_MOVES:
        for run, target in _boundary_moves(devices):
            moved = [g for c in run for g in deciding[order[c]] if target in ledger.group_targets[g]]
            if not moved:
                continue
            tried += 1
            kept = _faster_move(ledger, best_groups, best, moved, target)
            if kept is not None:
                (best_groups, best), improved = kept, True
                for c in run:
                    devices[c] = target
                break
            if tried >= MAX_MOVES:
                break
        else:
            break
    parts = [part.tolist() for c in order for part in np.array_split(np.asarray(deciding[c]), CLUSTER_PARTS)]
    moved_parts = _move_parts(ledger, [part for part in parts if part], best_groups, best)
    if moved_parts is not None:
        (best_groups, best), improved = moved_parts, True
    if not improved:
        return None
    return _placed(ledger, best_groups, [op for c in order for op in members[c]])


def _move_parts(
    ledger: MemoryLedger, parts: Sequence[list[int]], group_device: np.ndarray, current: Replay
) -> tuple[np.ndarray, Replay] | None:
    """The placement after the kept part moves (module docstring) from ``group_device``, whose
    replay is ``current``; ``None`` when no move helps."""
    kept: tuple[np.ndarray, Replay] | None = None
    budget = max(1, PART_MOVE_BUDGET // len(ledger.graph))
    tried = visited = since_kept = 0
    while tried < budget and since_kept < len(parts):
        part = parts[visited % len(parts)]
        visited += 1
        since_kept += 1
        for target in _part_targets(ledger, group_device):
            moved = [g for g in part if group_device[g] != target and target in ledger.group_targets[g]]
            if not moved:
                continue
            tried += 1
            result = _faster_move(ledger, group_device, current, moved, target)
            if result is not None:
                kept = (group_device, current) = result
                since_kept = 0
                break
            if tried >= budget:
                break
    return kept


def _part_targets(ledger: MemoryLedger, group_device: np.ndarray) -> list[int]:
    """The targets a part may move to: those holding groups and, of the empty ones alike (one
    host, kind and memory), the first."""
    devices = ledger.devices
    used = set(group_device[group_device < ledger.num_targets].tolist())
    alike: dict[tuple[str, str, int], int] = {}
    for d in range(ledger.num_targets):
        if d not in used:
            alike.setdefault((devices.host_of(d), devices.kind_of(d), devices.devices[d].memory), d)
    return sorted(used | set(alike.values()))


def _faster_move(
    ledger: MemoryLedger, group_device: np.ndarray, current: Replay, moved: list[int], target: int
) -> tuple[np.ndarray, Replay] | None:
    """``group_device`` with the groups ``moved`` on ``target``, and its replay, when its makespan
    is shorter than ``current``'s and every device's replayed peak fits; else ``None``."""
    trial = group_device.copy()
    trial[moved] = target
    schedule = executor_order(ledger.graph, trial[ledger.graph.group].tolist(), ledger.devices)
    if _makespan(ledger.graph, schedule) >= current.makespan * (1 - 1e-9):
        return None
    replay = ledger.replay_groups(trial, schedule)
    return (trial, replay) if _fits(ledger, replay) else None


def _deciding_groups(
    ledger: MemoryLedger,
    order: Sequence[int],
    members: Sequence[Sequence[int]],
    cluster_devices: Sequence[int],
) -> list[list[int]]:
    """For each cluster, the groups whose first op in ``order`` it holds and that went to the
    cluster's device (not elsewhere for want of a kernel or of memory)."""
    graph = ledger.graph
    deciding: list[list[int]] = [[] for _ in members]
    seen = np.zeros(len(graph.group_members), dtype=bool)
    for c in order:
        groups = graph.group[np.asarray(members[c], dtype=np.int64)]
        fresh = np.unique(groups[~seen[groups]])
        seen[fresh] = True
        deciding[c] = fresh[ledger.group_device[fresh] == cluster_devices[c]].tolist()
    return deciding


def _boundary_moves(devices: Sequence[int]) -> Iterator[tuple[range, int]]:
    """``(run of positions, target device)``: at each boundary between positions ``i`` and
    ``i + 1`` on different devices, the last ``k`` positions before it to the device after it and
    the first ``k`` after it to the device before it, within each side's run; ``k = 1`` at every
    boundary first, then ``k = 2, 4, ...``."""
    sides = []
    for i in range(len(devices) - 1):
        before, after = devices[i], devices[i + 1]
        if before == after:
            continue
        left = i
        while left > 0 and devices[left - 1] == before:
            left -= 1
        right = i + 1
        while right + 1 < len(devices) and devices[right + 1] == after:
            right += 1
        sides.append((i, i + 1 - left, right - i, before, after))
    k = 1
    while any(k <= max(lefts, rights) for _, lefts, rights, _, _ in sides):
        for i, lefts, rights, before, after in sides:
            if k <= lefts:
                yield range(i + 1 - k, i + 1), after
            if k <= rights:
                yield range(i + 1, i + 1 + k), before
        k *= 2


def _makespan(graph: IndexedGraph, schedule: ExecutorSchedule) -> float:
    return float((np.asarray(schedule.start) + graph.compute).max(initial=0.0))


def _fits(ledger: MemoryLedger, replay: Replay) -> bool:
    return all(replay.peak[d] <= device.memory for d, device in enumerate(ledger.devices.devices))


def _placed(template: MemoryLedger, group_device: np.ndarray, ops: list[int]) -> MemoryLedger:
    """A finished ledger with each group on ``group_device`` and the ops run in ``ops``' order."""
    ledger = template.blank()
    for device in np.unique(group_device).tolist():
        ledger.commit(np.flatnonzero(group_device == device).tolist(), device)
    ledger.run(ops)
    return ledger


def offload_side_work(ledger: MemoryLedger) -> MemoryLedger | None:
    """The finished liveness ``ledger`` of a one-device placement with its side work on an idle
    device (module docstring); ``None`` when no such move makes the replay faster or the budget
    allows no trial."""
    graph = ledger.graph
    trials = OFFLOAD_BUDGET // max(1, len(graph)) - 1
    busy = np.unique(ledger.group_device).tolist()
    idle = [d for d in _part_targets(ledger, ledger.group_device) if d not in busy]
    if trials < 1 or len(busy) != 1 or not idle or busy[0] >= ledger.num_targets:
        return None
    source, target = busy[0], idle[0]
    link = ledger.devices.link(source, target)
    schedule = executor_order(graph, ledger.op_devices().tolist(), ledger.devices)
    movable = [target in targets for targets in ledger.group_targets]
    slack, compute = _offload_slack(graph, schedule, movable, link)
    ranked = sorted((g for g in slack if compute[g] > 0), key=lambda g: -slack[g])
    moved = np.cumsum([compute[g] for g in ranked])
    count = next((k for k, g in enumerate(ranked) if slack[g] < moved[k]), len(ranked))
    best_groups, current = ledger.group_device, ledger.replayed()
    while count and trials:
        trials -= 1
        kept = _faster_move(ledger, best_groups, current, ranked[:count], target)
        if kept is not None:
            return _placed(ledger, kept[0], schedule.order)
        count //= 2
    return None


def _offload_slack(
    graph: IndexedGraph, schedule: ExecutorSchedule, movable: Sequence[bool], link: TransferModel | None
) -> tuple[dict[int, float], dict[int, float]]:
    """For each group that may move, the time its tensors would arrive on the busy device ahead of
    their consumers' starts in ``schedule`` were the group alone on the idle device behind
    ``link`` (a group nothing waits for: ahead of the step's end), when positive; and each
    group's compute."""
    start, group, succ, succ_bytes = schedule.start, graph.group.tolist(), graph.succ, graph.succ_bytes
    cost: list[float] = graph.compute.tolist()
    end = max((s + c for s, c in zip(start, cost)), default=0.0)

    def transfer(nbytes: int) -> float:
        return 0.0 if link is None else link.time(nbytes) if nbytes else link.b

    finish_alone: dict[int, float] = {}
    device_free: dict[int, float] = {}  # when each group's ops, one after another, are done so far
    slack: dict[int, float] = {}
    compute: dict[int, float] = {}
    for v in schedule.order:
        g = group[v]
        if not movable[g]:
            continue
        ready = device_free.get(g, 0.0)
        for u, position in zip(graph.pred[v], graph.pred_position[v]):
            arrival = start[u] + cost[u] + transfer(succ_bytes[u][position])
            ready = max(ready, finish_alone[u] if group[u] == g else arrival)
        finish_alone[v] = device_free[g] = ready + cost[v]
        compute[g] = compute.get(g, 0.0) + cost[v]
        ahead = slack.get(g, math.inf)
        outside = [(w, b) for w, b in zip(succ[v], succ_bytes[v]) if group[w] != g]
        for w, nbytes in outside:
            ahead = min(ahead, start[w] - finish_alone[v] - transfer(nbytes))
        if not succ[v]:
            ahead = min(ahead, end - finish_alone[v])
        slack[g] = ahead
    return {g: s for g, s in slack.items() if 0 < s < math.inf}, compute
