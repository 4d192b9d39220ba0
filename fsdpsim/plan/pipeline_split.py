"""How the transformer layers split over the pipeline ranks: the frameworks' default rules for
layer counts that do not divide evenly, and the user's own split.

A split is a tuple of layer counts, one per pipeline rank (all of a rank's virtual stages
together), first rank first. Layers that divide over ``pp × vpp`` split evenly under every
framework. Otherwise the framework profile decides (:func:`default_split`):

* ``megatron``, ``megatron-2021`` -- Megatron-Core's rule ([1] ``get_num_layers_to_build``,
  [2] ``validate_args``): with ``--account-for-embedding-in-pipeline-split`` and
  ``--account-for-loss-in-pipeline-split`` the embedding and the loss count as one layer each,
  ``L + 2`` (or ``L + 1`` with one flag) is divided over ``pp`` ranks (each rank's count by
  ``vpp``), and the first (last) virtual stage builds one layer fewer. Where no flag makes it
  divide, ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``: the
  middle ranks hold an even count (a multiple of ``vpp``), the two end ranks the rest, chosen to
  make the busiest rank (an end counted with its embedding or loss as one layer) lightest.
* every other profile (``fsdp2``, ``fsdp1``, ``deepspeed-*``, ``internevo``) -- torchtitan's
  automatic split ([3] ``generate_llm_fqn_per_model_part``, called by ``pipeline_module_split`` with
  ``pipeline_parallel_first_stage_less_layers = pipeline_parallel_last_stage_less_layers = 1``):
  ``L + 2`` effective layers over the ``pp × vpp`` virtual stages, the first
  ``(L + 2) mod (pp·vpp)`` stages one more; the first virtual stage gives one to the embedding,
  the last one to the norm and head; virtual stage ``j`` runs on rank ``j mod pp``. More
  virtual stages than ``L + 2`` torchtitan refuses, and so does fsdpsim (one line naming what is
  accepted); under ``nanotron`` the same loop leaves the trailing stages empty, as its
  cost-balanced placement does ([4] ``build_model``).

A Megatron split that none of its options reaches (layers not divisible by ``vpp``) falls back
to torchtitan's. DeepSpeed's own pipeline partitioning (``PipelineModule``,
``partition_method="parameters"``) and InternEvo's are not modelled: a row or a user states
such a split with ``pp_layers`` / ``--pp-layers``. Layers that divide over ``pp × vpp`` split
evenly under every profile (torchtitan itself would still shift one layer off each end).

References
----------
[1] Megatron-LM ``megatron/core/transformer/transformer_block.py``: ``get_num_layers_to_build``.
[2] Megatron-LM ``megatron/training/arguments.py``: ``validate_args`` (the divisibility checks of
    the two account flags and of the first/last stage layer counts).
[3] torchtitan ``torchtitan/distributed/pipeline_parallel.py``:
    ``generate_llm_fqn_per_model_part``, ``get_pipeline_metadata``.
[4] nanotron ``src/nanotron/models/base.py``: ``build_model`` (stages by cumulative cost).
"""

from __future__ import annotations

from dataclasses import dataclass

from fsdpsim.util.errors import ConfigError, shown

#: Profiles that split layers by Megatron-Core's rule (the others: torchtitan's).
MEGATRON_SPLIT = ("megatron", "megatron-2021")


@dataclass(frozen=True)
class Split:
    """Layers per pipeline rank and the rule that placed them."""

    counts: tuple[int, ...]
    """Layers on each pipeline rank, first to last [-]."""
    rule: str
    """How they were placed (for the notes): ``even``, the framework rule, or ``given``."""
    virtual: tuple[int, ...] | None = None
    """Layers of each virtual stage (model chunk), in torchtitan's order: chunk ``j`` on rank
    ``j mod pp``; None = each rank's layers in ``vpp`` chunks as even as they go, the first
    taking the remainder (:meth:`chunks`)."""

    @property
    def even(self) -> bool:
        return len(set(self.counts)) == 1

    def words(self, aside: str = "") -> str:
        """The split as the notes state it: ``15, 16 x6, 15 layers per stage (its rule; aside)``."""
        said = "; ".join(filter(None, (self.rule, aside)))
        return f"{describe(self.counts)} layers per stage ({said})"

    def chunks(self, vpp: int) -> tuple[int, ...]:
        """Layers of each of the ``len(counts) × vpp`` virtual stages, chunk ``v·pp + r`` on
        rank ``r`` (the looped placement of Interleaved1F1B and Megatron's virtual stages)."""
        if self.virtual is not None:
            return self.virtual
        pp = len(self.counts)
        per_rank = [[n // vpp + (v < n % vpp) for v in range(vpp)] for n in self.counts]
        return tuple(per_rank[r][v] for v in range(vpp) for r in range(pp))


def describe(counts: tuple[int, ...]) -> str:
    """Counts with runs folded: ``7, 8 x14, 7``."""
    parts: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        parts.append(f"{counts[i]}" + (f" x{j - i + 1}" if j > i else ""))
        i = j + 1
    return ", ".join(parts)


def parse_layers(text, what: str = "pp_layers") -> tuple[int, ...]:
    """Layer counts from ``31,32,32,31`` (or a sequence of integers): each a whole number >= 1,
    else a :class:`ConfigError` naming the value."""
    items = text.split(",") if isinstance(text, str) else list(text)
    counts = []
    for item in items:
        try:
            value = float(str(item).strip())
        except ValueError:
            value = float("nan")
        if not value == value or value != int(value) or value < 1:
            given = text if isinstance(text, str) else ",".join(map(str, items))
            raise ConfigError(f"{what} {shown(given)} "
                              f"is not accepted: {shown(str(item).strip())} is not a whole number "
                              ">= 1; accepted: layer counts per pipeline rank, comma-separated "
                              "(e.g. 31,32,32,31)")
        counts.append(int(value))
    return tuple(counts)


def _ranks(virtual: list[int], pp: int) -> tuple[int, ...]:
    """Per-rank counts of virtual-stage counts (virtual stage j on rank j mod pp)."""
    return tuple(sum(virtual[r::pp]) for r in range(pp))


def megatron_split(n_layers: int, pp: int, vpp: int) -> Split | None:
    """Megatron-Core's split ([1], [2]; module docstring), or None when none of its options
    reaches ``n_layers``."""
    flags = ((1, 1, "--account-for-embedding-in-pipeline-split "
                    "--account-for-loss-in-pipeline-split"),
             (0, 1, "--account-for-loss-in-pipeline-split"),
             (1, 0, "--account-for-embedding-in-pipeline-split"))
    for emb, loss, words in flags:
        total = n_layers + emb + loss
        if total % pp or (total // pp) % vpp:
            continue
        chunk = total // (pp * vpp)
        if chunk - max(emb, loss) < 0:
            continue
        virtual = [chunk] * (pp * vpp)
        virtual[0] -= emb
        virtual[-1] -= loss
        return Split(_ranks(virtual, pp), f"Megatron-Core {words}", tuple(virtual))
    if n_layers % vpp:
        return None
    best = None
    for mid in range(vpp, n_layers + 1, vpp):  # the middle ranks' count, a multiple of vpp
        rest = n_layers - mid * (pp - 2)
        if rest < 2 * vpp:
            break
        first = vpp * (rest // (2 * vpp))
        last = rest - first
        cost = max(first + 1, mid if pp > 2 else 0, last + 1)
        if best is None or cost < best[0]:
            best = (cost, (first,) + (mid,) * (pp - 2) + (last,))
        if pp == 2:  # no middle rank: one candidate
            break
    if best is None:
        return None
    counts = best[1]
    return Split(counts, f"Megatron-Core --decoder-first-pipeline-num-layers {counts[0]} "
                         f"--decoder-last-pipeline-num-layers {counts[-1]}")


def torchtitan_split(n_layers: int, pp: int, vpp: int, empty_stages: bool = False) -> Split:
    """torchtitan's automatic split ([3]; module docstring). More virtual stages than
    ``n_layers + 2`` torchtitan refuses (a :class:`ConfigError` naming what is accepted);
    ``empty_stages``: the trailing stages are left empty instead, as nanotron's cost-balanced
    placement does ([4])."""
    stages = pp * vpp
    effective = n_layers + 2  # the embedding and the norm + head weigh one layer each
    if stages > effective and not empty_stages:
        raise ConfigError(
            f"n_layers({n_layers}) over pp({pp}) x vpp({vpp}) = {stages} virtual stages: "
            f"torchtitan's split needs at most n_layers + 2 = {effective} (the embedding and "
            f"the head weigh one layer each); accepted: pp x vpp <= {effective}")
    base, extra = divmod(effective, stages)
    virtual, left = [], n_layers
    for j in range(stages):
        share = base + (j < extra) - (j == 0) - (j == stages - 1)
        take = min(max(share, 0), left)
        virtual.append(take)
        left -= take
    virtual[-1] += left  # nothing is left unless the head stage took fewer than its share
    rule = "torchtitan pipeline_module_split (embedding and head weigh one layer each)"
    if stages > effective:
        rule = "nanotron's placement (embedding and head weigh one layer each), trailing " \
               "stages empty"
    return Split(_ranks(virtual, pp), rule, tuple(virtual))


def default_split(n_layers: int, pp: int, vpp: int, framework: str) -> Split:
    """The split a framework makes by default (module docstring): even where ``n_layers``
    divides over ``pp × vpp``, else Megatron-Core's or torchtitan's rule."""
    if n_layers % (pp * vpp) == 0:
        return Split((n_layers // pp,) * pp, "even")
    if framework in MEGATRON_SPLIT:
        split = megatron_split(n_layers, pp, vpp)
        if split is not None:
            return split
    return torchtitan_split(n_layers, pp, vpp, empty_stages=framework == "nanotron")
