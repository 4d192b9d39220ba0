"""One plan, one answer: every command's default global batch and the framework's plan defaults
(fsdpsim.plan.training.default_global_batch, fsdpsim.plan.frameworks.plan_defaults)."""

from __future__ import annotations

import json

from conftest import invoke

from fsdpsim.plan.frameworks import plan_defaults
from fsdpsim.plan.training import default_global_batch

HYBRID = ("--model", "llama3-70b", "--gpu", "h100", "--num-gpus", "256", "--tp", "8", "--pp",
          "4", "--format", "json")


def test_default_batch_rule():
    assert default_global_batch(4096) == 1024 and default_global_batch(8192) == 512
    assert default_global_batch(4096, 2048) == 2048  # dp above the batch: one sequence each
    assert default_global_batch(4096, 96) == 1056  # 1,024 / 96 = 10.7 -> 11 x 96
    assert default_global_batch(4096, 3) == 1023
    assert default_global_batch(131072) == 32


def test_predict_hybrid_takes_the_framework_defaults():
    titan = json.loads(invoke("predict", *HYBRID))
    assert titan["plan"]["sharding"] == "full" and not titan["plan"]["reshard_after_forward"]
    assert not titan["plan"]["tp_overlap"] and titan["plan"]["sequence_parallel"]
    assert titan["training"]["global_batch"] == 1024
    assert any("--framework fsdp2" in n for n in titan["notes"])
    mega = json.loads(invoke("predict", *HYBRID, "--framework", "megatron"))
    assert mega["plan"]["sharding"] == "optimizer" and not mega["plan"]["tp_overlap"]
    assert any("distributed optimizer (ZeRO-1)" in n for n in mega["notes"])
    given = json.loads(invoke("predict", *HYBRID, "--framework", "megatron", "--sharding",
                              "full"))
    assert given["plan"]["sharding"] == "full"
    assert plan_defaults("fsdp2", tp=8, pp=1)[0]["reshard_after_forward"]
