"""The one vectorised evaluation that ``predict``, ``sweep`` and ``search`` share.

:func:`evaluate` takes a flat mapping of named numeric inputs (numbers or numpy arrays that
broadcast together; names carry units; built by :func:`fsdpsim.engine.build.config_inputs`) and
returns a flat mapping of named outputs. It composes the stages of this package
(:mod:`.stages`, one short function each, handing each other the typed results of
:mod:`.results`) and nothing else; every formula lives in
:mod:`fsdpsim.costs` with its source:

1. layout: group sizes and members per scale-up domain (:mod:`fsdpsim.plan.layout`, inputs
   ``*_size`` / ``*_per_node``), the inputs as the stages read them (:mod:`.prepare`: a
   read-only :class:`fsdpsim.engine.inputs.Prepared`, one attribute per field declared in
   :mod:`.inputs`, ``g.seq_len``; a misspelt or unset field is an AttributeError naming it);
2. :mod:`.layers`: one layer's and the root's compute on one rank (TP widths, CP tokens) and
   its tensor- and context-parallel collectives (:mod:`.collectives`), evaluated on a group's
   distinct layers (:mod:`.distinct`), each once in a process (:mod:`.memo`);
3. :mod:`.collectives`: data- and pipeline-parallel communication;
4. :mod:`.step`: a stage's micro-batch with FSDP overlap, the pipeline schedule, the step;
5. :mod:`.memory`: the peak of the binding stage and the ceilings;
6. :mod:`.metrics`: throughput, MFU/HFU (the bottleneck and the thresholds: the post-pass
   :mod:`fsdpsim.drivers.sensitivity`, from the engine's response to each resource).

Categorical inputs are integer codes so a grid can mix them: ``strategy`` (see
:data:`fsdpsim.costs.comm.STRATEGY_CODES`), ``recompute`` (0 none, 1 selective, 2 full,
3 op-selective),
``optimizer`` (0 adamw, 1 sgd), ``pp_schedule`` (:data:`fsdpsim.costs.schedule.SCHEDULE_CODES`),
and 0/1 flags ``swiglu``, ``rotary``, ``reshard``, ``flash``, ``sequence_parallel``,
``cp_all2all``, ``tp_overlap``.
"""

from __future__ import annotations

import math
import threading
from typing import Mapping

import numpy as np

from fsdpsim.costs.compute import all_of, filled_ids, may_be_shared, share_sides, where
from fsdpsim.engine import distinct, groups, heap, metrics, stages
from fsdpsim.engine.inputs import declared_names, unknown_names_error
from fsdpsim.engine.memory import OPTIMIZER_STATE_BYTES_PER_PARAM, engine_memory, memory_config
from fsdpsim.engine.prepare import OPTIONAL_INPUTS, prepare

RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2, "op-selective": 3}
OPTIMIZER_CODES = {"adamw": 0, "sgd": 1}
BOTTLENECKS = ("compute", "hbm_bandwidth", "intra_node_link", "inter_node_link",
               "memory_capacity", "pipeline_bubble", "collective_latency")
EXPOSED_COMM_BINDS = metrics.EXPOSED_COMM_BINDS

__all__ = ["evaluate", "prepare", "memory_breakdown", "memory_config", "choice_rank",
           "RECOMPUTE_CODES", "OPTIMIZER_CODES", "BOTTLENECKS", "OPTIMIZER_STATE_BYTES_PER_PARAM",
           "MEMORY_PRESSURE_FRACTION", "BLOCK_ROWS", "OPTIONAL_INPUTS", "INPUT_NAMES"]

#: Above this share of capacity PyTorch's caching allocator starts to free and retry
#: (``num_alloc_retries``), which slows steps in a way fsdpsim does not model: reports flag it
#: and ``auto`` knobs prefer candidates below it.
MEMORY_PRESSURE_FRACTION = 0.9


def choice_rank(out: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """How ``auto`` knobs rank candidates (predict and sweep alike): ``(tier, key)``, smaller
    first. Tier 0 fits with headroom (peak ≤ :data:`MEMORY_PRESSURE_FRACTION` of capacity),
    tier 1 fits only tightly, tier 2 does not fit; within a fitting tier the fastest
    (``key = -tokens/s``), otherwise the smallest peak memory."""
    peak, cap = np.asarray(out["peak_bytes"]), np.asarray(out["capacity_bytes"])
    fits = np.asarray(out["fits"], dtype=bool)
    tier = where(fits, where(peak <= MEMORY_PRESSURE_FRACTION * cap, 0, 1), 2)
    if "pipeline_ok" in out:  # a schedule the micro-batch count cannot run: last resort
        tier = where(np.asarray(out["pipeline_ok"], dtype=bool), tier, 3)
    key = where(fits, -np.asarray(out["tokens_per_s"]), peak)
    return tier, key


#: Rows per internal block: a large grid is evaluated in blocks so that the ~1,500 temporaries
#: of one evaluation stay in cache (measured 1.3-1.6x faster than one call on 10^6 rows).
BLOCK_ROWS = 65_536
#: Held by each :func:`evaluate` and :func:`memory_breakdown`: one evaluation at a time in a
#: process (threads that evaluate at once crashed on the caches of costs.arrays, "dictionary
#: changed size during iteration", and could read another evaluation's mask).
_ONE_AT_A_TIME = threading.RLock()
#: The most rows per block (:func:`_block_rows`): larger blocks' temporaries fall out of cache
#: (262,144 rows measured a quarter slower than 131,072).
MAX_BLOCK_ROWS = 2 * BLOCK_ROWS
#: From this many rows on, :func:`evaluate` tunes the C allocator to reuse the temporaries'
#: memory (:mod:`fsdpsim.engine.heap`: half the CPU time was page faults on 65,536 rows).
HEAP_TUNING_ROWS = 16_384
#: Every input name :func:`evaluate` and :func:`memory_breakdown` accept: the typed bundle's keys
#: (:class:`fsdpsim.engine.inputs.EngineInputs`) and the optional ones; any other is a TypeError.
INPUT_NAMES = declared_names() | frozenset(OPTIONAL_INPUTS)
#: Input types that are one value (one configuration's inputs, predict's: no shape to read).
_ONE_VALUE = frozenset((float, int, bool, np.float64))
#: From this many rows on, :func:`evaluate` groups rows by structure (:mod:`.groups`).
GROUP_ROWS = 2 * groups.MIN_GROUP_ROWS


def evaluate(x: Mapping[str, object], memory: bool = True,
             memo: bool = True) -> dict[str, np.ndarray]:
    """Predict one step for every configuration in ``x`` (broadcast); see :func:`_evaluate`.
    ``memory=False`` leaves out stage 5 (the memory of the binding stage and its ceilings:
    ``peak_bytes``, ``fits`` and the other :func:`fsdpsim.engine.memory.engine_memory`
    outputs), which no time depends on: the times of the variants that
    :mod:`fsdpsim.drivers.sensitivity` evaluates, a fifth less work a row. ``memo=False``
    neither looks up nor keeps distinct layers in :mod:`.memo` (those variants: their layers,
    each resource 5 % faster or a lattice point of a search, do not come back; keeping them
    cost a sweep 5 %); the numbers are the same either way.

    A large input is evaluated block by block (:data:`BLOCK_ROWS` consecutive rows), a block
    of :data:`GROUP_ROWS` configurations and more by group of rows that take the same branches
    (:mod:`.groups`), each input that is one value in a group passed as that value. Results
    are identical to one call on all rows; the outputs of an input of more than one block that
    share a dtype are rows of one array (:func:`_new_columns`). A name that is not an engine input
    (:data:`INPUT_NAMES`) is a TypeError naming it and the closest known names.

    Evaluations in one process run one at a time (:data:`_ONE_AT_A_TIME`): an evaluation keeps
    caches in module state (:mod:`fsdpsim.costs.arrays`' shared selects and masks, the fields
    :mod:`.distinct` has seen a stage read, the layers :mod:`.memo` keeps), so threads that
    evaluate at once (a Dask worker with several threads) take turns.
    """
    if not INPUT_NAMES.issuperset(x):
        raise unknown_names_error(x, INPUT_NAMES)
    with _ONE_AT_A_TIME:
        return _evaluate_input(x, memory, memo)


def _evaluate_input(x: Mapping[str, object], memory: bool,
                    memo: bool = True) -> dict[str, np.ndarray]:
    """:func:`evaluate` of checked names ``x``."""
    shapes = {np.shape(v) for v in x.values() if type(v) not in _ONE_VALUE}
    shape = np.broadcast_shapes(*shapes) if shapes else ()
    n = math.prod(shape)
    if n >= HEAP_TUNING_ROWS:  # temporaries of 128 KiB and more: keep them on the heap
        heap.keep_freed_memory()
    if n < GROUP_ROWS and n <= BLOCK_ROWS:
        return _evaluate(x, memory, n if len(shape) == 1 else 1, memo)  # 2-D inputs: whole
    flat = {k: (v if type(v) is np.ndarray and v.shape == shape else  # a column already
                np.broadcast_to(np.asarray(v), shape).reshape(-1) if np.ndim(v) else v)
            for k, v in x.items()}
    if n > BLOCK_ROWS:  # block by block, each grouped on its own; outputs straight into place
        result: dict[str, np.ndarray] = {}
        written = []  # each block's rows and the outputs it has
        block_rows = _block_rows(flat, n)
        for start in range(0, n, block_rows):
            rows = slice(start, min(start + block_rows, n))
            block = {k: (v[rows] if np.ndim(v) else v) for k, v in flat.items()}
            size = rows.stop - start
            parts = groups.split(block, size) if size >= GROUP_ROWS else None
            if parts is None:
                out = _evaluate(groups.constants(block), memory, size, memo)
                _new_columns(result, n, [out])
                _store(result, n, rows, out)
                written.append((rows, out.keys()))
            else:  # each group's outputs straight into place
                written.append((rows, _evaluate_groups(
                    block, n, [p + start for p in parts], parts, result, memory, memo)))
        for rows, keys in written:  # outputs a whole block lacks (its groups': filled in)
            _fill_missing(result, rows, result.keys() - keys)
        return {k: v.reshape(shape) for k, v in result.items()}
    if (parts := groups.split(flat, n)) is not None:
        result = {}
        _evaluate_groups(flat, n, parts, None, result, memory, memo)
        return {k: v.reshape(shape) for k, v in result.items()}
    out = _evaluate(groups.constants(flat), memory, n, memo)  # one value for all rows: once
    return {k: (v.reshape(shape) if np.shape(v) == (n,) else
                np.broadcast_to(v, (n,)).reshape(shape).copy()) for k, v in out.items()}


def _block_rows(flat: Mapping[str, object], n: int) -> int:
    """Rows per block of the ``n`` rows of ``flat``: :data:`BLOCK_ROWS`, or for an input that
    mixes more than two structures (:func:`fsdpsim.engine.groups.structure`; each a sixteenth
    of the rows or more) half of it per structure, up to :data:`MAX_BLOCK_ROWS`, so that a
    block's groups keep about half a block each: a group's fixed cost (a few thousand numpy
    calls) over more rows. bench_sweep's hybrid mix (four structures, one call on 262,144 rows,
    best of 11 in one process): 8-12 % quicker at 131,072 rows than at 65,536; its DeepSeek-V3
    grid (two structures) 4-5 % slower at 131,072."""
    code = groups.structure(flat, n)
    if code is None:
        return BLOCK_ROWS
    structures = int(np.count_nonzero(np.bincount(code) * 16 >= n))
    return min(MAX_BLOCK_ROWS, BLOCK_ROWS * max(2, structures) // 2)


def _evaluate_groups(flat: Mapping[str, object], n: int, parts: list[np.ndarray],
                     local: list[np.ndarray] | None, result: dict[str, np.ndarray],
                     memory: bool = True, memo: bool = True) -> set[str]:
    """:func:`_evaluate` on each group of rows ``parts`` of the ``n`` rows of ``flat`` (one
    block), gathered and stored column by column: each input column is read from memory once
    for all groups (it stays in cache between its groups' gathers; group by group, every group
    reads every cache line of every column again: measured 1.9x quicker gathers on 65,536
    rows of bench_sweep's hybrid mix), and each output column written once, as its groups'
    values one after the other put back in row order by one gather (:class:`_Unsort`).
    ``local``: the groups' rows in ``flat`` where ``parts`` are their rows in ``result`` (a
    block of a larger input, consecutive rows, its outputs stored in place; None: the same).
    An output some groups lack (the busiest middle stage's memory, of pipelined rows only) is
    filled in on their rows (:func:`_fill_missing`). Returns the outputs of the groups."""
    rows_in = parts if local is None else local
    if all(_contiguous(rows) for rows in rows_in):  # rows already grouped: slices, no gathers
        return _evaluate_slices(flat, n, rows_in, parts, result, memory, memo)
    blocks: list[dict[str, object]] = [{} for _ in parts]
    twins = groups.Twins()
    for k, v in flat.items():
        v = groups.one_value(v)  # one value for all rows: not gathered, computed once
        if np.ndim(v) and (twin := twins.twin(k, v)) is not None:  # gathered under that name
            for block in blocks:
                block[k] = block[twin]
        elif np.ndim(v):
            for block, rows in zip(blocks, rows_in):
                # numpy 2.4's checked take of ascending rows: 10 % quicker than mode="wrap"
                block[k] = groups.one_value(v.take(rows))  # one value: checked in cache
        else:
            for block in blocks:
                block[k] = v
    outs = [_evaluate(block, memory, rows.size, memo) for block, rows in zip(blocks, rows_in)]
    keys = dict.fromkeys(k for out in outs for k in out)
    if local is not None:  # a block of a larger input: the columns it lacks, made at once
        _new_columns(result, n, outs)
    unsort = _Unsort(rows_in, parts)
    stored: dict[tuple, str] = {}  # the outputs stored, by their groups' values (the objects)
    for k in keys:
        if all(k in out for out in outs):
            values = [out[k] for out in outs]
            same = stored.setdefault(tuple(map(id, values)), k)
            if same == k or not unsort.copy(result, n, same, k):
                unsort.store(result, n, values, k)
        else:
            for rows, out in zip(parts, outs):
                if k in out:
                    _store(result, n, rows, {k: out[k]})
    for rows, out in zip(parts, outs):
        _fill_missing(result, rows, keys.keys() - out.keys())
    return set(keys)


def _contiguous(rows: np.ndarray) -> bool:
    """Whether ascending distinct row numbers ``rows`` are one run (``a, a+1, ..., b``)."""
    return bool(rows.size) and int(rows[-1]) - int(rows[0]) + 1 == rows.size


def _span(rows: np.ndarray) -> slice:
    """The rows of a run (:func:`_contiguous`) as a slice."""
    return slice(int(rows[0]), int(rows[-1]) + 1)


def _evaluate_slices(flat: Mapping[str, object], n: int, rows_in: list[np.ndarray],
                     parts: list[np.ndarray], result: dict[str, np.ndarray],
                     memory: bool, memo: bool = True) -> set[str]:
    """:func:`_evaluate_groups` where each group's rows are one run of ``flat``'s (a caller
    that orders its rows by structure, :mod:`fsdpsim.drivers.sensitivity`): each group reads
    its inputs as views and writes its outputs into place, nothing gathered or put back in
    order; the same numbers and dtypes."""
    outs = [_evaluate({k: (groups.one_value(v[_span(rows)]) if np.ndim(v) else v)
                       for k, v in flat.items()}, memory, rows.size, memo) for rows in rows_in]
    _new_columns(result, n, outs)
    for rows, out in zip(parts, outs):
        _store(result, n, _span(rows), out)
    keys = set().union(*(out.keys() for out in outs))
    for rows, out in zip(parts, outs):
        _fill_missing(result, _span(rows), keys - out.keys())
    return keys


class _Unsort:
    """Puts a block's groups' output values, concatenated group after group, back in row order:
    one gather by the inverse permutation (2-3x quicker than an indexed assignment per group,
    which numpy 2 runs element by element)."""

    def __init__(self, rows_in: list[np.ndarray], parts: list[np.ndarray]):
        self._sizes = [rows.size for rows in rows_in]
        order = np.concatenate(rows_in)
        self._inverse = np.empty(order.size, dtype=np.intp)
        self._inverse[order] = np.arange(order.size)
        first = int(parts[0][0]) - int(rows_in[0][0])  # block offset in ``result``
        self._span = slice(first, first + order.size)

    def store(self, result: dict[str, np.ndarray], n: int, values: list, key: str) -> None:
        """``values`` (one per group: an array of its rows or one value) into ``result[key]``
        of ``n`` rows, typed as :func:`_store` types them; one value in every group (a zero
        term of the block's structures, a constant) is filled in, not gathered."""
        same = groups.common_value(values)
        if same is not None:
            column = None
            dtype = same.dtype
        else:
            column = np.concatenate([v if np.ndim(v) else np.full(size, v)
                                     for v, size in zip(values, self._sizes)])
            dtype = column.dtype
        if key not in result:
            if self._span.start == 0 and self._span.stop == n:
                result[key] = (np.full(n, same, dtype=dtype) if column is None else
                               column.take(self._inverse))
                return
            result[key] = np.empty(n, dtype=dtype)
        elif dtype != result[key].dtype:
            wider = np.result_type(result[key].dtype, dtype)
            if wider != result[key].dtype:
                result[key] = result[key].astype(wider)
            if column is not None:
                column = column.astype(wider)
        if column is None:
            result[key][self._span] = same
        else:
            # into place: mode="wrap" (a checked take into ``out`` copies through a buffer)
            np.take(column, self._inverse, out=result[key][self._span], mode="wrap")

    def copy(self, result: dict[str, np.ndarray], n: int, source: str, key: str) -> bool:
        """``result[key]`` on this block's rows as a copy of ``result[source]``'s (an output
        whose groups' values are the same objects as another's: one is stored, the other
        copied, not gathered again); False (nothing done) where the dtypes differ."""
        column = result[source]
        if key not in result:
            if self._span.start == 0 and self._span.stop == n:
                result[key] = column.copy()
                return True
            result[key] = np.empty(n, dtype=column.dtype)
        elif result[key].dtype != column.dtype:
            return False
        result[key][self._span] = column[self._span]
        return True


def _new_columns(result: dict[str, np.ndarray], n: int, outs: list[Mapping]) -> None:
    """Empty columns of ``n`` rows in ``result`` for the outputs of ``outs`` (one mapping per
    group) that it lacks, typed as :func:`_store` types them; the columns of one dtype are the
    rows of one array. One allocation of 4 MiB and more, which numpy asks the kernel to back
    with huge pages (``madvise``), in place of one of a few MiB per output: on 300,000 rows of
    bench_sweep's hybrid Mixtral mix, 760 page faults a call in place of 30,500 (and 0.04-0.08 s
    of its 0.4 s in the kernel)."""
    dtypes: dict[str, list] = {}
    for out in outs:
        for k, v in out.items():
            if k not in result:
                dtypes.setdefault(k, []).append(np.asarray(v).dtype)
    by_dtype: dict[np.dtype, list[str]] = {}
    for k, types in dtypes.items():
        by_dtype.setdefault(np.result_type(*types), []).append(k)
    for dtype, keys in by_dtype.items():
        result.update(zip(keys, np.empty((len(keys), n), dtype=dtype)))


def _fill_missing(result: dict[str, np.ndarray], rows, missing) -> None:
    """The outputs ``missing`` of ``result``, which the rows ``rows`` (a slice or indices) do
    not have, filled in there (:func:`fsdpsim.engine.groups.no_value`); never the memory a
    column was made in."""
    for k in missing:
        result[k][rows] = groups.no_value(result[k].dtype)


def _store(result: dict[str, np.ndarray], n: int, rows, out: Mapping[str, object]) -> None:
    """``out``, the outputs of ``rows`` (a slice or indices), into the full-length ``result``
    arrays, typed as np.concatenate would type them (a later block of a wider dtype widens
    the column)."""
    for k, v in out.items():
        dtype = np.asarray(v).dtype
        if k not in result:
            result[k] = np.empty(n, dtype=dtype)
        elif dtype != result[k].dtype:
            result[k] = result[k].astype(np.result_type(result[k].dtype, dtype))
        result[k][rows] = v  # indexed assignment: 2.5-3x quicker than np.put (numpy 2)


def _evaluate(x: Mapping[str, object], memory: bool = True,
              rows: int | None = None, memo: bool = True) -> dict[str, np.ndarray]:
    """Predict one step for every configuration in ``x`` (broadcast); ``rows``: how many, where
    every input that varies is a flat array of that many (1: evaluate every row as it is;
    None: counted from ``x``).

    Required keys (units in names): model ``n_layers, d_model, n_heads, q_dim, kv_dim,
    ffn_size, swiglu, rotary, vocab_size, n_params, matmul_params, active_experts,
    block_numel, block_numel_padded, root_numel_padded, n_params_padded``; hardware
    ``peak_flops_per_s, matmul_fraction, matmul_half_flops, matmul_half_k, attention_fraction,
    attention_half_kv, hbm_bytes_per_s, hbm_fraction, link_bytes_per_s, link_fraction,
    link_latency_s, nic_share_bytes_per_s, nic_fraction, nic_latency_s, kernel_overhead_s,
    comm_compute_slowdown, memory_bytes, runtime_reserved_bytes, allocator_fraction``; plan
    ``num_gpus, gpus_per_node, strategy, shard_size, replicate_size, reshard``; training
    ``seq_len, micro_batch, grad_accum, recompute, compute_bytes, reduce_bytes, optimizer,
    flash``. Hybrid-parallel inputs (``tp, pp, cp, vpp, ...``, :data:`OPTIONAL_INPUTS`) default
    to a data-parallel plan.
    """
    shared = share_sides(True)  # the stages change no array in place
    try:
        g = prepare(x)
        # the stages of engine/stages.py, in order; a layer on a group's distinct layers where
        # it is the costly kind (measured: a plain data-parallel layer costs less than that)
        layer = distinct.evaluate(stages.layer_costs, g, _rows(x) if rows is None else rows,
                                  worth=stages.costly_layer,
                                  flags=stages.layer_flags if memo else None)
        comm = stages.communication(g, layer)
        step = stages.step_times(g, layer, comm)
        total = stages.totals(g, layer, comm, step)
        out = stages.outputs(g, layer, comm, step, total,
                             stages.tensor_bytes(g, layer, comm, total))
        if memory:  # stage 5
            out.update(engine_memory(g, ceilings=bool(all_of(g.ceilings > 0))))
        long = [k for k, v in out.items() if may_be_shared(v)]
        # (the arrays of one number the stages shared; the store is cleared below)
        taken = filled_ids() if long else None
    finally:
        share_sides(shared)
    # every output an array of its own: one that is an input array itself (a select that
    # picked it everywhere), an array of one number the stages shared
    # (costs.arrays.filled_ids) or an array under a second name (stages.totals: tp_exposed_s is
    # tp_s without TP overlap; the first name keeps it) is copied
    if long:
        taken.update(id(v) for v in (*x.values(), *g.values()))
        for k in long:
            if id(out[k]) in taken:
                out[k] = out[k].copy()
            else:
                taken.add(id(out[k]))
    return out


def _rows(x: Mapping[str, object]) -> int:
    """The rows of ``x`` where every input that varies is a flat array of one length; else 1."""
    shapes = {np.shape(v) for v in x.values() if np.ndim(v)}
    return next(iter(shapes))[0] if len(shapes) == 1 and len(next(iter(shapes))) == 1 else 1


def memory_breakdown(x: Mapping[str, object], ceilings: bool = True) -> dict[str, np.ndarray]:
    """Per-GPU memory of every configuration in ``x`` (see :mod:`fsdpsim.costs.memory`), whether
    it fits, and (``ceilings``) the largest micro-batch and sequence length that fit; an unknown
    input name is a TypeError, as for :func:`evaluate`."""
    if not INPUT_NAMES.issuperset(x):
        raise unknown_names_error(x, INPUT_NAMES)
    with _ONE_AT_A_TIME:
        return engine_memory(prepare(x), ceilings)
