"""The inputs of :func:`fsdpsim.costs.memory.memory_moments`, one named tuple per concern:
the batch the ceilings solve for, the model states, the gathered FSDP units, the saved
activations and the logits, bundled in :class:`MemoryInputs`.

Each field is a number, a numpy array (broadcasting with the others) or, for the categorical
ones, a name or an integer code; units in brackets. A misspelt keyword is a ``TypeError`` when
the inputs are built (:meth:`MemoryInputs.of`), not a default silently used. The meaning of
every term is documented in :func:`fsdpsim.costs.memory.peak_memory_bytes`.

Named tuples, not dataclasses: as immutable and as strict about names (a field that is not
declared can be neither read nor set), and made at import for a twentieth of the time (Python
3.11 compiles each of a dataclass's methods on its own: 6 dataclasses were ~6 ms of every
command's start-up).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, NamedTuple


class Batch(NamedTuple):
    """The two unknowns of :mod:`fsdpsim.costs.ceilings`: the peak is affine in the first and
    a polynomial of degree at most 2 in the second."""
    micro_batch: Any            # sequences per micro-batch [-]
    seq_len: Any                # tokens per sequence [-]


class ModelStates(NamedTuple):
    """Parameters, gradients and optimizer states (:func:`fsdpsim.costs.memory.
    model_state_bytes`), and the routed experts' (sharded over their own group)."""
    n_params: Any                       # parameters on this rank [-]
    shard_size: Any                     # GPUs the states are sharded over [-]
    strategy: Any                       # name of :data:`STRATEGIES` or its code
    replicate_size: Any = 1             # replicas of each shard group (HSDP) [-]
    padded_n_params: Any = None         # with FSDP2's padding; None = n_params [-]
    param_bytes: Any = 4.0              # resident parameter copy [B per parameter]
    grad_bytes: Any = 4.0               # gradient [B per parameter]
    optimizer_bytes_per_param: Any = 8.0  # optimizer states [B per parameter]
    expert_n_params: Any = 0.0          # routed-expert parameters on this rank [-]
    expert_shard_size: Any = 1.0        # the expert data-parallel group [-]


class GatheredUnits(NamedTuple):
    """FSDP's gathered parameters and unsharded gradients (:func:`fsdpsim.costs.memory.
    fsdp_buffer_bytes`)."""
    unit_numel: Any                     # elements of the largest unit [-]
    compute_param_bytes: Any = 2.0      # gathered parameter [B per element]
    compute_grad_bytes: Any = 2.0       # computed gradient [B per element]
    reduce_grad_bytes: Any = 4.0        # gradient in the reduce dtype [B per element]
    prefetch_units: Any = 2             # units gathered at once in backward [-]
    reshard_after_forward: Any = True   # units resharded after their forward [-]
    resident_numel: Any = 0.0           # elements never resharded (the root) [-]
    accumulated_grad_numel: Any = 0.0   # unsharded gradients accumulated over micro-batches [-]


class Activations(NamedTuple):
    """What the layers save for backward and rebuild under recompute
    (:func:`fsdpsim.costs.activations.activation_bytes_per_layer`), the LM head's inputs, and
    the routed experts' activations per token."""
    n_layers: Any                       # transformer layers on this rank [-]
    d_model: Any                        # hidden size [-]
    q_dim: Any                          # query width (heads x head dim) [-]
    kv_dim: Any                         # key / value width [-]
    ffn_size: Any                       # MLP width (routed experts' total) [-]
    ffn_kind: Any                       # name of :data:`FFN_KINDS` or its code
    n_heads: Any                        # attention heads [-]
    recompute: Any = "none"             # name of :data:`RECOMPUTE` or its code
    flash_attention: Any = True         # no s x s scores saved [-]
    act_bytes: Any = 2.0                # saved activation [B per element]
    dropout: Any = False                # dropout masks saved [-]
    fused_glu: Any = True               # SwiGLU without silu(gate) saved [-]
    tp: Any = 1                         # tensor-parallel degree [-]
    cp: Any = 1                         # context-parallel degree [-]
    sequence_parallel: Any = True       # h-sized tensors split over tp [-]
    linear_bias: Any = False            # linear layers with biases [-]
    saved_microbatches: Any = 1         # micro-batches alive at once (pipelining) [-]
    recomputed_layers: Any = None       # layers that apply recompute; None = all [-]
    moe_saved_bytes_per_token: Any = 0.0    # routed activations saved [B per token]
    moe_working_bytes_per_token: Any = 0.0  # one MoE layer's rows in flight [B per token]


class Logits(NamedTuple):
    """The LM head's logits and the loss's temporaries (:func:`fsdpsim.costs.activations.
    logits_bytes`)."""
    vocab_size: Any                     # vocabulary on this stage (0: no head) [-]
    logits_dtype_bytes: Any = 2.0       # logit [B]
    loss_fp32: Any = True               # cross-entropy temporaries in fp32 [-]
    fused_loss: Any = False             # a fused cross-entropy kernel [-]


class MemoryInputs(NamedTuple):
    """Every input of :func:`fsdpsim.costs.memory.memory_moments`, by concern, and what lies
    outside the caching allocator. ``check`` False: the categorical fields are integer codes
    and the group sizes and degrees at least 1 (the engine's, checked with its plan)."""
    batch: Batch
    states: ModelStates
    units: GatheredUnits
    activations: Activations
    logits: Logits
    runtime_reserved_bytes: Any = 0.0   # CUDA context, NCCL and cuBLAS workspaces [B]
    allocator_fraction: Any = 0.0       # caching allocator's fragmentation [-]
    check: bool = True

    @classmethod
    def of(cls, **keywords) -> MemoryInputs:
        """The inputs from the flat keywords of :func:`fsdpsim.costs.memory.peak_memory_bytes`
        (each field's name), sorted into their concerns; an unknown or a missing keyword is a
        TypeError that names it. (Item getters over the keywords and the defaults: this runs
        twice per prediction.)"""
        if not _NAMES.issuperset(keywords):
            unknown = ", ".join(repr(k) for k in keywords if k not in _NAMES)
            raise TypeError(f"memory inputs: unknown keyword {unknown}; accepted: "
                            f"{', '.join(_NAMES_IN_ORDER)}")
        given = _DEFAULTS | keywords
        try:
            batch, states, units, activations, logits = (
                _GETTERS[0](given), _GETTERS[1](given), _GETTERS[2](given), _GETTERS[3](given),
                _GETTERS[4](given))
        except KeyError as missing:
            raise TypeError(f"memory inputs: missing keyword {missing.args[0]!r}") from None
        return cls(Batch(*batch), ModelStates(*states), GatheredUnits(*units),
                   Activations(*activations), Logits(*logits), *_OWN(given))

    def with_batch(self, micro_batch, seq_len) -> MemoryInputs:
        """The same inputs at another micro-batch and sequence length (the ceilings' points)."""
        return MemoryInputs(Batch(micro_batch, seq_len), self.states, self.units,
                            self.activations, self.logits, self.runtime_reserved_bytes,
                            self.allocator_fraction, self.check)

    def values(self) -> list:
        """Every field's value, the concerns' fields in turn (to find the inputs' shape)."""
        out = [getattr(part, name) for part, names in zip(
            (self.batch, self.states, self.units, self.activations, self.logits), _FIELDS)
            for name in names]
        return out + [self.runtime_reserved_bytes, self.allocator_fraction, self.check]


_PARTS = (Batch, ModelStates, GatheredUnits, Activations, Logits)
#: Each concern's field names, in :meth:`MemoryInputs.values`'s order.
_FIELDS = tuple(part._fields for part in _PARTS)
#: The bundle's own fields besides the concerns.
_OWN_FIELDS = ("runtime_reserved_bytes", "allocator_fraction", "check")
_NAMES_IN_ORDER = tuple(name for names in _FIELDS for name in names) + _OWN_FIELDS
_NAMES = frozenset(_NAMES_IN_ORDER)
#: The defaults of the fields that have one.
_DEFAULTS = {name: value for part in (*_PARTS, MemoryInputs)
             for name, value in part._field_defaults.items()}
_GETTERS = tuple(itemgetter(*names) for names in _FIELDS)
_OWN = itemgetter(*_OWN_FIELDS)
