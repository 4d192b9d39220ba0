"""Plans whose measured runs the model is known not to reproduce, by framework: a warning in
``predict``'s notes, with where the evidence is. Nothing here changes a number; each entry is
what a measurement file shows and the model does not explain (``docs/accuracy.md``).
"""

from __future__ import annotations

from fsdpsim.plan.frameworks import canonical
from fsdpsim.plan.layout import members_per_domain

#: nanotron (Hugging Face's Ultra-Scale Playbook sweep, ``validation/data/
#: hopper_bf16_nanotron.csv``): with TP > 1 and a pipeline over more than one node, a layer of
#: a stage took at least about (tp + 2.3) x 2.5 ms per micro-batch at micro-batches 1-4 (the
#: same for DP 1-16, pipelines of 2-32 stages, widths 2,048-8,192): up to several times the
#: modelled step; no mechanism found in its code (docs/accuracy.md, "Nanotron (H100 BF16)").
NANOTRON_TP_PIPELINE = ("nanotron with TP and a pipeline over more than one node: its measured "
                        "runs of this shape took at least about (tp + 2.3) x 2.5 ms per layer "
                        "and micro-batch of a stage, up to several times the modelled step at "
                        "small micro-batches; not modelled and not in the range "
                        "(docs/accuracy.md, Nanotron)")


def known_gaps(framework: str, plan) -> list[str]:
    """What the measurements say the model misses for ``plan`` (a
    :class:`~fsdpsim.plan.parallel.ParallelPlan`) under ``framework``, each a warning; [] for
    every other plan."""
    if canonical(framework) == "nanotron" and plan.tp > 1 and plan.pp > 1:
        # across nodes as the range's pipeline term reads it: fewer stages in a node than pp
        if members_per_domain(plan, ("pp",), plan.gpus_per_node) < plan.pp:
            return [NANOTRON_TP_PIPELINE]
    return []


__all__ = ["known_gaps", "NANOTRON_TP_PIPELINE"]
