"""A training plan as one line of text, and that line read back: the one spelling that
``predict``, ``sweep``, ``search``, ``compare`` and ``report`` print and ``predict --plan``
reads.

A :class:`RunPlan` is a :class:`~fsdpsim.plan.parallel.ParallelPlan` with the micro-batch, the
gradient accumulation and the recompute it runs. Its line lists the mesh dimensions, outermost
data first, joined by ``" × "``, then the settings of the step joined by ``" · "`` (read also
as typed on a plain keyboard: ``" x "`` or ``" * "``, and ``" . "``)::

    hsdp2x16 × cp2(a2a) × tp8(sp,overlap) × pp4(interleaved, v=2, m=32, first=10, last=12)
        × ep8(etp1,overlap) · ckpt full 12 · mb 1 · sync last · keep gathered
        · order pp,dp_replicate,dp_shard,cp,tp

- data: ``fsdpN`` (ZeRO-3 over N), ``zero2-N``, ``zero1-N``, ``ddpN``, ``hsdpRxS`` (HSDP: R
  replicas of S-way shards), ``zero1-RxS`` (ZeRO-1 in groups of S, InternEvo); left out when
  the data-parallel degree is 1 with ZeRO-3 and another dimension is there;
- ``cpN`` (ring attention) or ``cpN(a2a)`` (Ulysses all-to-all);
- ``tpN`` with ``sp`` (sequence parallelism) and ``overlap`` (TP communication overlap) in
  brackets where on;
- ``ppN(schedule, v=V, m=M, first=F, last=L, layers=A/B/...)``: the schedule, the virtual
  stages per rank (when > 1), the micro-batches per step (the accumulation), the layers of the
  first and last stages (when uneven) or of every stage (a stated split, ``--pp-layers``);
- ``epN`` with ``etpE`` (where the expert TP differs from TP; ``ep1(etpE)`` without EP) and
  ``overlap`` (EP all-to-all overlap) in brackets;
- ``ckpt none|sel|full|op`` (``--recompute``'s words read too) and the recomputed layers of
  each stage (``K``; ``K/L`` with a stage's layers reads back the same), ``mb N``,
  ``accum N`` (without a pipeline, when above 1), ``sync last``, ``keep gathered``, ``no
  reshard`` and ``order`` (the full mesh order, when not the default).

The GPU count, the GPUs per scale-up domain and the framework are not in the line: the
command around it states them. ``parse_plan(format_plan(r), ...) == r`` for every valid plan
in canonical form (:func:`canonical`); ``tests/test_plan_spelling.py`` checks it with
hypothesis.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace

from fsdpsim.plan.knobs import KNOBS, PLAN_SWITCHES, dim_switches
from fsdpsim.plan.parallel import DEFAULT_MESH_ORDER, PP_SCHEDULES, RECOMPUTES, ParallelPlan
from fsdpsim.util.errors import ConfigError

DIM_SEP = " × "
SETTING_SEP = " · "
_DATA_WORDS = {"full": "fsdp", "grad_op": "zero2-", "optimizer": "zero1-", "none": "ddp"}
_CKPT_WORDS = {"none": "none", "selective": "sel", "full": "full", "op-selective": "op"}
#: Words a dimension's brackets take besides its switches' (:func:`_switch_words`).
_DIM_WORDS = {"ep": ("etpE",)}


def _switch_words(dim: str) -> list[str]:
    """The words of ``dim``'s brackets: its own (:data:`_DIM_WORDS`), then each plan switch's
    (:attr:`fsdpsim.plan.knobs.Knob.spelled`), in declaration order."""
    return [*_DIM_WORDS.get(dim, ()), *(w for k in dim_switches(dim) for w in k.spelled.values())]


ACCEPTED = ("accepted: dimensions fsdpN, zero2-N, zero1-N, ddpN, hsdpRxS, zero1-RxS, "
            f"cpN[({','.join(_switch_words('cp'))})], tpN[({','.join(_switch_words('tp'))})], "
            "ppN(schedule[, v=V][, m=M][, first=F][, last=L][, layers=A/B]), "
            f"epN[({','.join(_switch_words('ep'))})] joined by ' × ', then settings "
            "'ckpt none|sel|full|op [K]' "
            "(or selective, op-selective), 'mb N', 'accum N', 'sync last', 'keep gathered', "
            "'no reshard', 'order a,b,c,d,e' joined by ' · '")


@dataclass(frozen=True)
class RunPlan:
    """A parallel plan with the micro-batch, accumulation and recompute of its step."""

    plan: ParallelPlan
    micro_batch: int
    """Sequences per micro-batch on one data-parallel rank [-]."""
    grad_accum: int
    """Micro-batches per step on one data-parallel rank (the pipeline's m) [-]."""
    recompute: str = "none"
    """none, selective, full or op-selective."""
    recompute_layers: int | None = None
    """Layers of each pipeline stage that recompute (Megatron --recompute-num-layers); None =
    all of them (or none for ``recompute = "none"``) [-]."""
    recompute_of: int | None = field(default=None, compare=False)
    """The layers of a stage a line states (``ckpt full K/L``: ``L``), for the command that
    knows the model to check; None = not stated [-]."""

    @property
    def global_batch(self) -> int:
        """Sequences per step: micro-batch × accumulation × data-parallel degree [-]."""
        return self.micro_batch * self.grad_accum * self.plan.dp


def canonical(plan: ParallelPlan) -> ParallelPlan:
    """``plan`` with its implied settings written out, so equal plans compare equal: the HSDP
    shard group given, a grouped ZeRO-1 group of the whole data-parallel group left implied,
    the CP kind of a plan without CP ``ring``."""
    group = plan.shard_group_size
    if plan.sharding == "hybrid":
        group = plan.dp_shard
    elif group == plan.dp or plan.sharding != "optimizer":
        group = None
    # a switch of a dimension of degree 1 means nothing: its plain value
    plain = {k.name: k.plain_value for k in (KNOBS[name] for name in PLAN_SWITCHES)
             if getattr(plan, k.dim) == 1}
    return replace(plan, shard_group_size=group, **plain)


def _brackets(plan: ParallelPlan, dim: str, words: tuple[str, ...] = ()) -> str:
    """``dim``'s degree and, in brackets, ``words`` then the words of its switches that are
    set (:attr:`fsdpsim.plan.knobs.Knob.spelled`): ``tp4(sp,overlap)``, ``cp2``."""
    words = [*words, *(k.spelled[v] for k in dim_switches(dim)
                       if (v := getattr(plan, k.name)) in k.spelled)]
    return f"{dim}{getattr(plan, dim)}" + (f"({','.join(words)})" if words else "")


def _read_switches(text: str, dim: str, written: str, flags: list[str], kw: dict) -> list[str]:
    """The switches of ``dim`` that ``flags`` (the words in the brackets of ``written``)
    spell into ``kw``, each not spelled its plain value; the words left (none for a dimension
    without words of its own). A word repeated is an error naming what ``dim`` accepts."""
    spelled = {w: (k.name, v) for k in dim_switches(dim) for v, w in k.spelled.items()}
    for k in dim_switches(dim):
        kw[k.name] = k.plain_value
    for f in flags:
        if f in spelled:
            kw[spelled[f][0]] = spelled[f][1]
    rest = [f for f in flags if f not in spelled]
    if len(set(flags)) != len(flags) or (rest and dim not in _DIM_WORDS):
        raise _error(text, f"{dim} accepts {_alternatives(_switch_words(dim))}, got "
                           f"{written!r}")
    return rest


def _alternatives(words: list[str]) -> str:
    """``(a)``; ``(a), (b) or (a,b)``: each word alone, or all of them."""
    alone = [f"({w})" for w in words]
    return alone[0] if len(alone) == 1 else f"{', '.join(alone)} or ({','.join(words)})"


def format_plan(run: RunPlan) -> str:
    """The plan's one line (module docstring)."""
    p = run.plan
    settings = [ckpt_text(run.recompute, run.recompute_layers), f"mb {run.micro_batch}"]
    if p.pp == 1 and run.grad_accum > 1:
        settings.append(f"accum {run.grad_accum}")
    # the degrees: one text per plan (and accumulation, a pipeline's m), which a sweep's rows
    # share across their micro-batches and recompute modes
    return SETTING_SEP.join([_dims_text(p, run.grad_accum if p.pp > 1 else 1), *settings,
                             *_switch_settings(p)])


@functools.lru_cache(maxsize=4096)
def _dims_text(p: ParallelPlan, grad_accum: int) -> str:
    """The degrees part of :func:`format_plan`'s line (``grad_accum``: the pipeline's m)."""
    dims = []
    if p.sharding == "hybrid":
        dims.append(f"hsdp{p.dp_replicate}x{p.dp_shard}")
    elif p.sharding == "optimizer" and p.dp_replicate > 1:
        dims.append(f"zero1-{p.dp_replicate}x{p.dp_shard}")
    elif p.dp > 1 or p.sharding != "full" or p.tp * p.pp * p.cp == 1:
        dims.append(f"{_DATA_WORDS[p.sharding]}{p.dp}")
    if p.cp > 1:
        dims.append(_brackets(p, "cp"))
    if p.tp > 1:
        dims.append(_brackets(p, "tp"))
    if p.pp > 1:
        sched = [p.pp_schedule] + ([f"v={p.vpp}"] if p.vpp > 1 else []) + [f"m={grad_accum}"]
        sched += [f"{name}={value}" for name, value in (("first", p.pp_first_layers),
                                                          ("last", p.pp_last_layers))
                  if value is not None]
        if p.pp_layers is not None:  # a stated split: every stage's layers
            sched.append("layers=" + "/".join(str(k) for k in p.pp_layers))
        dims.append(f"pp{p.pp}({', '.join(sched)})")
    if p.ep > 1 or p.etp != p.tp:
        dims.append(_brackets(p, "ep", (f"etp{p.etp}",) if p.etp != p.tp else ()))
    return DIM_SEP.join(dims)


@functools.lru_cache(maxsize=4096)
def _switch_settings(p: ParallelPlan) -> tuple[str, ...]:
    """The plan's switches among :func:`format_plan`'s settings, after the micro-batch's."""
    settings = []
    if p.grad_sync == "last":
        settings.append("sync last")
    if p.keep_gathered:
        settings.append("keep gathered")
    elif not p.reshard_after_forward:
        settings.append("no reshard")
    if p.mesh_order != DEFAULT_MESH_ORDER:
        settings.append("order " + ",".join(p.mesh_order))
    return tuple(settings)


def ckpt_text(recompute: str, recompute_layers: int | None = None) -> str:
    """``ckpt none``, ``ckpt full``, ``ckpt sel``, ``ckpt op`` or ``ckpt full 12`` (12 layers of
    each stage recomputed): the one spelling of every report (``12/40`` reads back the same)."""
    text = f"ckpt {_CKPT_WORDS[recompute]}"
    if recompute == "none" or recompute_layers is None:
        return text
    return f"{text} {recompute_layers}"


def _error(text: str, what: str) -> ConfigError:
    return ConfigError(f"--plan {text!r}: {what}; {ACCEPTED}")


_DATA_RE = re.compile(r"^(fsdp|zero2-|zero1-|ddp|hsdp)(\d+)(?:x(\d+))?$")
_DIM_RE = re.compile(r"^(cp|tp|pp|ep)(\d+)(?:\((.*)\))?$")


def parse_plan(text: str, *, num_gpus: int, gpus_per_node: int,
               framework: str = "fsdp2") -> RunPlan:
    """The :class:`RunPlan` a line of :func:`format_plan` names, on ``num_gpus`` GPUs
    (``gpus_per_node`` per scale-up domain) under ``framework``. Raises :class:`ConfigError`
    naming the part it cannot read, or the degrees that do not multiply to ``num_gpus``."""
    text = " ".join(text.split())  # a line broken over several (a quoted shell argument) reads
    # as typed on a keyboard without them: " x " or " * " for " × ", " . " for " · "
    text = text.replace(" x ", " × ").replace(" * ", " × ").replace(" . ", " · ")
    if not text:
        raise ConfigError(f"--plan {text!r} is empty; accepted: a plan such as "
                          f"'fsdp8 × tp8 · ckpt none · mb 2' "
                          f"({ACCEPTED.removeprefix('accepted: ')})")
    parts = [s.strip() for s in text.split("·")]
    dims_text, settings = parts[0], parts[1:]
    if not dims_text:
        raise _error(text, "no mesh dimensions")
    kw: dict = {"tp": 1, "pp": 1, "cp": 1}
    data = None
    accum = None
    seen = set()
    for dim in (d.strip() for d in dims_text.split("×")):
        m = _DATA_RE.match(dim)
        if m and data is None and not seen:
            data = m.groups()
            seen.add("data")
            continue
        m = _DIM_RE.match(dim)
        if not m or m.group(1) in seen:
            raise _error(text, f"cannot read {dim!r} (or it repeats, or comes out of order)")
        name, degree, inner = m.group(1), int(m.group(2)), m.group(3)
        seen.add(name)
        flags = [f.strip() for f in inner.split(",")] if inner else []
        kw[name] = degree
        if name == "pp":
            accum = _pp_settings(text, dim, flags, kw)
            continue
        for f in _read_switches(text, name, dim, flags, kw):  # ep's own: etpE
            if not re.fullmatch(r"etp\d+", f):
                raise _error(text, f"ep accepts {_alternatives(_switch_words('ep'))}, got "
                                   f"{dim!r}")
            kw["etp"] = int(f[3:])
    model_parallel = kw["tp"] * kw["pp"] * kw["cp"]
    if data is None:
        sharding, dp, group = "full", num_gpus // model_parallel, None
    else:
        word, first, second = data
        sharding = {"fsdp": "full", "zero2-": "grad_op", "zero1-": "optimizer", "ddp": "none",
                    "hsdp": "hybrid"}[word]
        if second is None and word == "hsdp":
            raise _error(text, "hsdp needs replicas x shards: hsdpRxS")
        if second is not None and word not in ("hsdp", "zero1-"):
            raise _error(text, f"{word}{first}x{second}: only hsdp and zero1- take RxS")
        dp = int(first) * int(second) if second is not None else int(first)
        group = int(second) if second is not None else None
    if dp * model_parallel != num_gpus:
        raise ConfigError(f"--plan {text!r}: dp({dp}) * cp({kw['cp']}) * tp({kw['tp']}) * "
                          f"pp({kw['pp']}) != num_gpus({num_gpus}); accepted: degrees whose "
                          f"product is {num_gpus}")
    run = {"micro_batch": None, "grad_accum": accum, "recompute": None, "recompute_layers": None,
           "recompute_of": None}
    for s in settings:
        _setting(text, s, kw, run)
    missing = [part for part, key in (("'ckpt ...'", "recompute"), ("'mb N'", "micro_batch"))
               if run[key] is None]
    if missing:
        raise _error(text, f"it needs {' and '.join(missing)}")
    if kw["pp"] == 1 and run["grad_accum"] is None:
        run["grad_accum"] = 1
    if run["grad_accum"] is None:
        raise _error(text, "a pipeline needs its micro-batches per step: ppN(schedule, m=M)")
    plan = ParallelPlan(num_gpus=num_gpus, gpus_per_node=gpus_per_node, sharding=sharding,
                        shard_group_size=group, framework=framework, **kw)
    return RunPlan(plan=canonical(plan), **run)


def _pp_settings(text: str, dim: str, flags: list[str], kw: dict) -> int | None:
    """The schedule, ``v=``, ``first=``, ``last=``, ``layers=`` of a ``ppN(...)`` into ``kw``;
    ``m=`` returned."""
    accum = None
    for f in flags:
        key, _, value = f.partition("=")
        counts = value.split("/")
        if key == "layers" and all(c.isdigit() and int(c) > 0 for c in counts):
            kw["pp_layers"] = tuple(int(c) for c in counts)
        elif not value and key in PP_SCHEDULES:
            kw["pp_schedule"] = key
        elif key in ("v", "m", "first", "last") and value.isdigit() and int(value) > 0:
            if key == "m":
                accum = int(value)
            else:
                kw[{"v": "vpp", "first": "pp_first_layers", "last": "pp_last_layers"}[key]] = \
                    int(value)
        else:
            raise _error(text, f"cannot read {f!r} of {dim!r} (schedules: "
                               f"{', '.join(PP_SCHEDULES)})")
    return accum


def _setting(text: str, s: str, kw: dict, run: dict) -> None:
    """One ``·``-separated setting into the plan's keywords ``kw`` or the step's ``run``."""
    words = s.split()
    ckpt = {**{k: k for k in _CKPT_WORDS}, **{v: k for k, v in _CKPT_WORDS.items()}}
    if len(words) in (2, 3) and words[0] == "ckpt" and words[1] in ckpt:
        run["recompute"] = ckpt[words[1]]
        if len(words) == 3:
            m = re.fullmatch(r"(\d+)(?:/(\d+))?", words[2])
            if not m or words[1] == "none":
                raise _error(text, f"cannot read {s!r}")
            run["recompute_layers"] = int(m.group(1))
            run["recompute_of"] = None if m.group(2) is None else int(m.group(2))
    elif len(words) == 2 and words[0] in ("mb", "accum") and words[1].isdigit() \
            and int(words[1]) > 0:
        run["micro_batch" if words[0] == "mb" else "grad_accum"] = int(words[1])
    elif s == "sync last":
        kw["grad_sync"] = "last"
    elif s == "keep gathered":
        kw["keep_gathered"] = True
    elif s == "no reshard":
        kw["reshard_after_forward"] = False
    elif len(words) == 2 and words[0] == "order":
        kw["mesh_order"] = tuple(words[1].split(","))
    else:
        raise _error(text, f"cannot read {s!r}")


__all__ = ["RunPlan", "format_plan", "parse_plan", "canonical", "RECOMPUTES"]
