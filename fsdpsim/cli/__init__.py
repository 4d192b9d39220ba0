"""The ``fsdpsim`` command line: parse, call, render. No formulas live here.

Every error from bad input is one line on stderr and exit status 2 (:func:`main`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from fsdpsim.report import render
from fsdpsim.hardware.catalog import ENV_VAR, KINDS, load_catalog
from fsdpsim.util.output import OutputClosed, OutputError, echo, flush_stdout
from fsdpsim.util.errors import ConfigError
from fsdpsim.util.units import GBIT_PER_S_BYTES_PER_S, GIB_BYTES, TFLOPS_FLOPS_PER_S

FORMAT_OPTION = click.option("--format", "fmt", type=click.Choice(render.FORMATS),
                             default="table", show_default=True, help="Output format.")


def _catalog(ctx: click.Context):
    return load_catalog(ctx.obj.get("catalog_dirs", ()))


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: click's own text, with the version read only when asked for."""
    if not value or ctx.resilient_parsing:
        return
    from fsdpsim import __version__

    click.echo(f"fsdpsim, version {__version__}")
    ctx.exit()


class OnceCommand(click.Command):
    """A command whose one-value options are given at most once: click would keep the last of
    ``--gpu h100 --gpu b200`` silently, so a repeat is a one-line error naming its values."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and not ctx.resilient_parsing:
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            once = [p for p in order if isinstance(p, click.Option) and not p.multiple
                    and not p.count and not p.is_eager]
            repeated = [p for p in dict.fromkeys(once) if once.count(p) > 1]
            if repeated:
                p = repeated[0]
                given = ", ".join(_spellings(p, args))
                raise click.UsageError(f"{p.opts[0]} is given {once.count(p)} times ({given}); "
                                       f"accepted: one {'/'.join(p.opts + p.secondary_opts)}",
                                       ctx)
        return super().parse_args(ctx, args)


def _spellings(option: click.Option, args: list[str]) -> list[str]:
    """How ``option`` is written in ``args``: ``--gpu h100``, ``--gpu=b200``, ``--no-x``."""
    names = (*option.opts, *option.secondary_opts)
    out = []
    for i, arg in enumerate(args):
        name = arg.split("=", 1)[0]
        if name not in names:
            continue
        takes_value = not option.is_flag and "=" not in arg and i + 1 < len(args)
        out.append(f"{arg} {args[i + 1]}" if takes_value else arg)
    return out


class OnceGroup(click.Group):
    """A group whose commands are :class:`OnceCommand` (and whose groups are too)."""

    command_class = OnceCommand


OnceGroup.group_class = OnceGroup


class LazyGroup(OnceGroup):
    """The command group: ``predict``, ``sweep``, ``plot``, ``validate`` and ``calibrate`` live
    in their own modules, imported (and registered) when a command of theirs is looked up, so
    ``fsdpsim predict`` does not import the sweep, plot and validation code (fast start)."""

    #: Command name -> the module whose ``register(group)`` defines it.
    LAZY = {"predict": "fsdpsim.cli.predict", "sweep": "fsdpsim.cli.sweep",
            "plot": "fsdpsim.cli.plot", "validate": "fsdpsim.cli.validate",
            "calibrate": "fsdpsim.cli.validate", "search": "fsdpsim.cli.search",
            "compare": "fsdpsim.cli.compare", "report": "fsdpsim.cli.compare"}

    #: Freeze the objects a command's modules made once loaded (:func:`gc.freeze`: later
    #: collections skip them); set by :func:`main` for the process's own command line, whose
    #: imports live until it exits.
    freeze_imports = False

    def _load(self, name: str) -> None:
        import importlib

        if name in self.commands:
            return
        # An unknown name (a typo) loads them all: click suggests the closest of self.commands.
        names = [name] if name in self.LAZY else [n for n in self.LAZY if n not in self.commands]
        for module in dict.fromkeys(self.LAZY[n] for n in names):
            if not any(self.LAZY[n] == module and n in self.commands for n in self.LAZY):
                importlib.import_module(module).register(self)
        if self.freeze_imports:
            import gc

            gc.freeze()

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self._load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self.LAZY))


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and exit.")
@click.option("--catalog", "catalog_dirs", multiple=True, type=click.Path(), envvar=None,
              help="Extra catalog folder of hardware or models (repeatable); also "
                   "FSDPSIM_CATALOG.")
@click.pass_context
def cli(ctx: click.Context, catalog_dirs: tuple[str, ...]) -> None:
    """fsdpsim: predict step time, throughput, MFU and memory of FSDP training."""
    ctx.ensure_object(dict)
    ctx.obj["catalog_dirs"] = catalog_dirs
    if catalog_dirs or os.environ.get(ENV_VAR):
        from fsdpsim.model.catalog import use_folders, user_folders, with_folders

        use_folders(catalog_dirs)  # models of these folders, wherever this command names one
        ctx.call_on_close(lambda: use_folders(()))  # and not in the next command of a process
        with_folders(user_folders())  # their models checked now, not when one is first used


# -- catalog -------------------------------------------------------------------------------------
@cli.group()
def catalog() -> None:
    """List and show hardware catalog entries."""


#: Column names of ``catalog list``'s table (CSV and JSON keep the long, unit-bearing ones).
_SHORT_HEADS = {"memory_gib": "GiB", "hbm_tb_per_s": "HBM TB/s", "bf16_tflops": "BF16 TF/s",
                "link_gb_per_s": "link GB/s", "gbit_per_s_per_nic": "NIC Gb/s",
                "latency_us": "lat us", "achievable_fraction": "achievable",
                "gpus_per_node": "GPUs/node", "nics_per_node": "NICs/node",
                "inter_node_gbit_per_s_per_gpu": "Gb/s/GPU", "ring_base_us": "base us",
                "nvlink_hop_us": "NVLink hop us", "net_hop_us": "net hop us"}


def _summary(cat, kind: str, ident: str) -> dict[str, Any]:
    if kind == "accelerator":
        a = cat.accelerator(ident)
        peak = a.peak_flops_per_s
        return {"id": a.id, "name": a.name, "memory_gib": round(a.memory_bytes / GIB_BYTES, 2),
                "hbm_tb_per_s": a.hbm_bandwidth_bytes_per_s / 1e12,
                "bf16_tflops": (peak.get("bf16") or peak.get("fp16") or 0) / TFLOPS_FLOPS_PER_S,
                "link_gb_per_s": a.link.bandwidth_bytes_per_s / 1e9,
                "aliases": ", ".join(a.aliases)}
    if kind == "network":
        n = cat.network(ident)
        # "fabric", not "kind": in JSON/CSV rows "kind" is the catalog kind (network).
        return {"id": n.id, "name": n.name, "fabric": n.kind,
                "gbit_per_s_per_nic": n.nic_bandwidth_bytes_per_s / GBIT_PER_S_BYTES_PER_S,
                "latency_us": n.latency_s * 1e6, "achievable_fraction": n.achievable_fraction,
                "aliases": ", ".join(n.aliases)}
    if kind == "node":
        n = cat.node(ident)
        return {"id": n.id, "name": n.name, "accelerator": n.accelerator.id,
                "gpus_per_node": n.gpus_per_node, "network": n.network.id,
                "nics_per_node": n.nics_per_node,
                "inter_node_gbit_per_s_per_gpu": round(n.inter_node_gbit_per_s_per_gpu, 2),
                "aliases": ", ".join(n.aliases)}
    if kind == "collectives":
        lib = cat.collectives(ident)
        simple = lib.latency_us["simple"]
        return {"id": lib.id, "name": lib.name, "library": lib.library, "version": lib.version,
                "ring_base_us": simple["ring_base_us"],
                "nvlink_hop_us": simple["ring_nvlink_hop_us"],
                "net_hop_us": simple["ring_net_hop_us"], "aliases": ", ".join(lib.aliases)}
    c = cat.cluster(ident)
    return {"id": c.id, "name": c.name, "node": c.node.id, "accelerator": c.node.accelerator.id,
            "num_nodes": c.num_nodes if c.num_nodes is not None else "",
            "gpus": c.num_nodes * c.node.gpus_per_node if c.num_nodes else "",
            "aliases": ", ".join(c.aliases)}


@catalog.command("list")
@click.option("--kind", type=click.Choice(KINDS), default=None, help="Only this kind of entry.")
@FORMAT_OPTION
@click.pass_context
def catalog_list(ctx: click.Context, kind: str | None, fmt: str) -> None:
    """List catalog entries (all kinds, or one)."""
    cat = _catalog(ctx)
    kinds = [kind] if kind else list(KINDS)
    if fmt == "table":
        blocks = []
        for k in kinds:
            rows = [_summary(cat, k, i) for i in cat.ids(k)]
            title = k if k.endswith("s") else f"{k}s"
            blocks.append(f"{title} ({len(rows)})\n{render.narrow_table(rows, _SHORT_HEADS)}")
        echo("\n\n".join(blocks))
        return
    rows = [{"kind": k, **_summary(cat, k, i)} for k in kinds for i in cat.ids(k)]
    echo(render.to_json(rows) if fmt == "json" else render.csv_text(rows), nl=fmt == "json")


@catalog.command("show")
@click.argument("entry_id")
@FORMAT_OPTION
@click.pass_context
def catalog_show(ctx: click.Context, entry_id: str, fmt: str) -> None:
    """Show one entry of any kind, as written (datasheet units), with its files."""
    cat = _catalog(ctx)
    kind, ident = cat.find(entry_id)
    raw = dict(cat.raw(kind, ident))
    # The entry stays under its own key: its fields (a network's `kind`) must not clobber ours.
    data = {"kind": kind, "id": ident, "entry": raw, "files": list(cat.origins(kind, ident))}
    if fmt == "json":
        echo(render.to_json(data))
    elif fmt == "csv":
        echo(render.csv_text([data]), nl=False)
    else:
        echo(f"{kind} {ident}")
        echo("\n".join(render.raw_entry_lines(raw)))
        echo(f"  files  {', '.join(cat.origins(kind, ident))}")


# -- model ---------------------------------------------------------------------------------------
@cli.group()
def model() -> None:
    """List and show model specifications."""


@model.command("list")
@FORMAT_OPTION
def model_list(fmt: str) -> None:
    """List the model presets (built-in and those of --catalog folders)."""
    from fsdpsim.model.catalog import user_folders, with_folders

    specs = with_folders(user_folders()).specs
    rows = [{"id": name, "n_params": spec.n_params, "active_params": spec.active_params,
             "n_layers": spec.n_layers, "d_model": spec.d_model, "n_heads": spec.n_heads,
             "kv_heads": spec.kv_heads, "ffn": f"{spec.ffn_kind} {spec.ffn_size}",
             "vocab": spec.vocab_size}
            for name, spec in sorted(specs.items(), key=lambda kv: kv[1].n_params)]
    _emit_rows(rows, fmt)


def _model_dict(spec) -> dict[str, Any]:
    from dataclasses import asdict

    counts = spec.param_counts()
    return {"spec": asdict(spec), "layer_pattern": spec.layer_pattern, "n_params": spec.n_params,
            "params": {k: v for k, v in counts.items()},
            "block_params": spec.block_params if spec.uniform_layers else None,
            "matmul_params": spec.matmul_params, "active_params": spec.active_params,
            "active_params_without_embedding": spec.active_params_without_embedding,
            "expert_params": spec.expert_params, "dense_params": spec.dense_params,
            "mtp_params": spec.mtp_params}


@model.command("show")
@click.argument("model_name")
@FORMAT_OPTION
def model_show(model_name: str, fmt: str) -> None:
    """Show a preset or a Hugging Face config.json: spec and parameter breakdown."""
    from fsdpsim.model.presets import get_model

    spec = get_model(model_name)
    data = _model_dict(spec)
    if fmt == "json":
        echo(render.to_json(data))
        return
    if fmt == "csv":
        echo(render.csv_text([data]), nl=False)
        return
    echo(f"model {spec.name}")
    echo(f"layers {spec.layer_pattern}")
    echo(render.key_values([(k, v) for k, v in data["spec"].items()]))
    n = spec.n_params
    rows = [{"component": k, "params": f"{v:,}", "share": f"{100 * v / n:.2f} %"}
            for k, v in data["params"].items()]
    rows.append({"component": "total", "params": f"{n:,}", "share": "100.00 %"})
    echo("\nparameters")
    echo(render.table(rows))
    echo(f"\ntotal {n:,}; active per token {spec.active_params:,} "
         f"({spec.active_params_without_embedding:,} without the input embedding)")
    if spec.is_moe:
        echo(f"routed experts {spec.expert_params:,}; dense (everything else) "
             f"{spec.dense_params:,}")
    if spec.mtp_params:
        echo(f"multi-token prediction modules {spec.mtp_params:,} (not in the total: they "
             f"share the embedding and head)")
    block = f"per block {spec.block_params:,}; " if spec.uniform_layers else ""
    echo(f"{block}used in matmuls per token {spec.matmul_params:,}")


def _emit_rows(rows, fmt: str) -> None:
    if fmt == "json":
        echo(render.to_json(rows))
    elif fmt == "csv":
        echo(render.csv_text(rows), nl=False)
    else:
        echo(render.table(rows))



def _one_line(text: str) -> str:
    """``text`` on one line: the error contract is exactly one line on stderr."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _error(message: str) -> int:
    click.echo(f"fsdpsim: error: {_one_line(message)}", err=True)
    return 2


#: click >= 8.2 raises this (a UsageError whose message is the whole help text) for a group
#: called without a command; click 8.1 prints the help and exits 0 instead.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI; bad input → one line on stderr, exit status 2. Without
    ``argv`` (the process's own command line: the ``fsdpsim`` script, ``python -m
    fsdpsim.cli``) the objects left are frozen (:func:`gc.freeze`) before the process exits:
    the interpreter's final collection then skips the walk over every object the imports made
    (pandas, numpy: about 0.1 s of each command's exit), as the collections while the command
    runs skip those of its modules' imports (:attr:`LazyGroup.freeze_imports`)."""
    cli.freeze_imports = argv is None
    status = _main(argv)
    if argv is None:
        import gc

        gc.freeze()
    return status


def _main(argv: list[str] | None) -> int:
    """:func:`main`'s command run."""
    try:
        cli.main(args=argv, prog_name="fsdpsim", standalone_mode=False)
        flush_stdout()
    except OutputClosed:  # e.g. `fsdpsim catalog list | head`: the reader has what it wanted
        return 0
    except OutputError as exc:  # e.g. `> /dev/full`: one line and status 2, as for bad input
        return _error(str(exc))
    except ConfigError as exc:
        return _error(str(exc))
    except _NO_ARGS_IS_HELP as exc:
        ctx = exc.ctx
        commands = ", ".join(ctx.command.list_commands(ctx)) if ctx else ""
        path = ctx.command_path if ctx else "fsdpsim"
        return _error(f"missing command; accepted: {commands} (try `{path} --help`)")
    except click.UsageError as exc:
        hint = f" (try `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        return _error(f"{exc.format_message()}{hint}")
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        click.echo("fsdpsim: aborted", err=True)
        return 1
    except MemoryError:
        return _error("out of memory: this command needs more memory than is free; a sweep "
                      "written with --format csv or json streams its rows, or give a smaller "
                      "grid")
    return 0

