"""`sgdscale import`: torch.profiler traces recorded here (small CNN and MLP on the CPU) against
sgdscale's own profiler on the same model; B-Caffe logs and OSU tables from
benchmarks/public_data/bcaffe; every bad input is one line, exit status 2 and no output file."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from sgdscale.cli import main
from sgdscale.comm.network import load_network
from sgdscale.profile import load_profile

BCAFFE = Path(__file__).resolve().parent.parent / "benchmarks" / "public_data" / "bcaffe"


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(argv, capsys, output: Path, *fragments: str) -> str:
    code, out, err = run(argv, capsys)
    assert code == 2, (out, err)
    assert err.startswith("error: ") and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    assert not output.exists(), "an output file was written for a bad input"
    assert not list(output.parent.glob(f".{output.name}.*")), "a temporary file was left behind"
    return err


# ----------------------------------------------------------------------------- torch.profiler traces


def _record(workload, batch_size: int, path: Path, steps: int, *, schedule: bool = True, with_stack: bool = True):
    """Train `steps` steps under torch.profiler (after 2 warm-up steps) and export the Chrome trace."""
    torch = pytest.importorskip("torch")
    optimizer = torch.optim.SGD(workload.module.parameters(), lr=1e-3, momentum=0.9)
    options = dict(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=with_stack, with_modules=True,
                   record_shapes=True)
    if schedule:
        options["schedule"] = torch.profiler.schedule(wait=0, warmup=2, active=steps, repeat=1)
        options["on_trace_ready"] = lambda prof: prof.export_chrome_trace(str(path))
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # as sgdscale's profiler runs
    try:
        with torch.profiler.profile(**options) as prof:
            for _ in range(steps + 2):
                x, y = workload.make_batch(batch_size)
                optimizer.zero_grad(set_to_none=True)
                workload.loss_fn(workload.module(x), y).backward()
                optimizer.step()
                prof.step()
        if not schedule:
            prof.export_chrome_trace(str(path))
    finally:
        torch.set_num_threads(previous)


def _layer_shares(profile) -> dict[str, float]:
    """Each layer's forward+backward as a share of the model's forward+backward (per-layer medians:
    robust to a neighbour's burst on a shared machine)."""
    totals = {layer.name: statistics.median(layer.forward_samples_s) + statistics.median(layer.backward_samples_s)
              for layer in profile.layers}
    whole = sum(totals.values())
    return {name: t / whole for name, t in totals.items()}


CASES = {"cnn": ({"width": 32}, 32), "mlp": ({"width": 1024, "depth": 3, "input_dim": 1024}, 64)}


@pytest.mark.parametrize("model", sorted(CASES))
def test_imported_trace_matches_sgdscale_profiler(model, tmp_path, capsys):
    """Same model, traced with torch.profiler and imported, vs profiled by sgdscale.

    Exact: layer names and forward order, tensor names, sizes and bytes, the layer order in which
    gradients become ready, one sample per traced step. Approximate: each layer's share of the
    forward+backward time within 0.10 (absolute), and the forward share of compute within 0.12.
    Why so loose: the two measurements are separate runs on a 2-core machine other jobs share (load
    average 4-5 while this was written); sgdscale's profiler run twice in a row gave per-layer shares
    0.03-0.05 apart on the cnn and 0.05-0.08 on the mlp (three pairs each), and with_stack's Python tracing adds a few percent to every module call
    (the last layer's share rises by about 0.02 from the loss's traced Python calls). Five rounds
    are allowed for a disturbed one (a fresh-clone CI run on 2026-12-02 had three in a row at 0.108-0.129,
    and then passed twice in a row alone); the bound itself never widens."""
    pytest.importorskip("torch")
    from sgdscale.profiling.profiler import profile_workload
    from sgdscale.profiling.zoo import build_workload

    options, batch = CASES[model]
    info_path = tmp_path / "info.json"
    opts = [f"--option={k}={v}" for k, v in options.items()]
    code, out, err = run(["import", "model-info", model, "-o", info_path, *opts], capsys)
    assert code == 0, err
    worst = []
    for attempt in range(5):
        workload = build_workload(model, **options)
        trace = tmp_path / f"trace{attempt}.json"
        _record(workload, batch, trace, steps=8)
        out_path = tmp_path / f"imported{attempt}.json"
        code, out, err = run(["import", "kineto", trace, "--model-info", info_path, "--batch-size", batch,
                              "-o", out_path], capsys)
        assert code == 0, err
        imported = load_profile(out_path)
        own = profile_workload(workload, batch, warmup=2, iterations=8, threads=1)

        assert [layer.name for layer in imported.layers] == [layer.name for layer in own.layers]
        assert [(t.name, t.numel, t.bytes) for t in imported.tensors] == [(t.name, t.numel, t.bytes) for t in own.tensors]
        assert imported.param_count == sum(p.numel() for p in workload.module.parameters())

        def ready_layers(profile):
            last = {layer.name: max(t.grad_ready_s for t in layer.params) for layer in profile.layers}
            return sorted(last, key=last.get)

        assert ready_layers(imported) == ready_layers(own)
        assert imported.measured_iterations == 8 and len(imported.iteration_s.samples) == 8
        assert all(len(layer.forward_samples_s) == 8 for layer in imported.layers)
        # The parts add up to each traced step (data_s is the rest of it).
        assert imported.compute_s == pytest.approx(imported.iteration_s.mean, rel=1e-9)
        assert imported.step.optimizer_s > 0

        a, b = _layer_shares(imported), _layer_shares(own)
        layer_gap = max(abs(a[name] - b[name]) for name in a)
        fwd = lambda p: p.forward_s / (p.forward_s + p.backward_s)  # noqa: E731
        forward_gap = abs(fwd(imported) - fwd(own))
        worst.append((layer_gap, forward_gap))
        if layer_gap <= 0.10 and forward_gap <= 0.12:
            break
    print(f"\n{model}: (max per-layer share gap, forward-share gap) per round: {worst}")
    assert min(worst)[0] <= 0.10 and min(worst, key=lambda w: w[1])[1] <= 0.12, worst


def test_kineto_bad_inputs_are_one_line_errors(tmp_path, capsys):
    pytest.importorskip("torch")
    from sgdscale.profiling.zoo import build_workload

    out = tmp_path / "out" / "p.json"
    info = tmp_path / "mlp.info.json"
    assert run(["import", "model-info", "mlp", "-o", info, "--option", "width=32", "--option", "depth=2"], capsys)[0] == 0
    workload = build_workload("mlp", width=32, depth=2)
    good = tmp_path / "good.json"
    _record(workload, 8, good, steps=2)
    base = ["--model-info", info, "--batch-size", 8, "-o", out]

    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert_user_error(["import", "kineto", text, *base], capsys, out, "not a Chrome trace")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "sgdscale.profile/1"}))
    assert_user_error(["import", "kineto", other, *base], capsys, out, "not a Chrome trace")
    assert_user_error(["import", "kineto", tmp_path / "missing.json", *base], capsys, out, "does not exist")

    no_steps = tmp_path / "nosteps.json"
    _record(workload, 8, no_steps, steps=2, schedule=False)
    assert_user_error(["import", "kineto", no_steps, *base], capsys, out, "no ProfilerStep#N events", "prof.step()")
    no_modules = tmp_path / "nomodules.json"
    _record(workload, 8, no_modules, steps=2, with_stack=False)
    assert_user_error(["import", "kineto", no_modules, *base], capsys, out, "with_stack=True")

    # A model-info from another model: a different number of Linear modules, then different sizes.
    deeper = tmp_path / "deeper.info.json"
    assert run(["import", "model-info", "mlp", "-o", deeper, "--option", "width=32", "--option", "depth=3"], capsys)[0] == 0
    err = assert_user_error(["import", "kineto", good, "--model-info", deeper, "--batch-size", 8, "-o", out], capsys,
                            out, "model-info does not match the trace", "sgdscale import model-info")
    assert "Linear" in err
    wider = tmp_path / "wider.info.json"
    assert run(["import", "model-info", "mlp", "-o", wider, "--option", "width=48", "--option", "depth=2"], capsys)[0] == 0
    assert_user_error(["import", "kineto", good, "--model-info", wider, "--batch-size", 8, "-o", out], capsys,
                      out, "model-info does not match the trace", "shape")
    assert_user_error(["import", "kineto", good, "--model-info", tmp_path / "nope.json", "--batch-size", 8, "-o", out],
                      capsys, out, "model-info file", "does not exist")
    assert_user_error(["import", "kineto", good, "--model-info", good, "--batch-size", 8, "-o", out],
                      capsys, out, "not a model-info file")
    assert_user_error(["import", "kineto", good, "--model-info", info, "--batch-size", 0, "-o", out],
                      capsys, out, "batch size")
    # and the good trace imports
    assert run(["import", "kineto", good, *base], capsys)[0] == 0
    assert load_profile(out).measured_iterations == 2


# ----------------------------------------------------------------------------- B-Caffe and OSU


def test_bcaffe_googlenet_log_becomes_a_profile(tmp_path, capsys):
    out = tmp_path / "g2.json"
    code, _, err = run(["import", "bcaffe", BCAFFE / "tmp2comm.log", "-o", out], capsys)
    assert code == 0, err
    profile = load_profile(out)
    assert len(profile.tensors) == 128 and len(profile.layers) == 64
    lines = (BCAFFE / "tmp2comm.log").read_text().splitlines()[128:]  # after the setup block
    floats = [int(line.rsplit("[", 1)[1].split(",")[1]) for line in lines]
    assert profile.param_count == sum(floats) == 13_379_136  # GoogLeNet with both auxiliary classifiers
    assert profile.gradient_bytes == 4 * profile.param_count
    assert profile.layers[0].backward_s == pytest.approx(14690.2e-6)  # conv1's logged backward
    assert profile.layers[0].forward_s == pytest.approx(0.5 * 14690.2e-6)
    assert profile.backward_s == pytest.approx(0.2003, abs=1e-4)
    # Ready in reverse forward order, each when its layer's backward ends; the first layer last.
    ready = [max(t.grad_ready_s for t in layer.params) for layer in profile.layers]
    assert ready == sorted(ready, reverse=True)
    assert ready[0] == pytest.approx(profile.backward_s)
    measured = profile.provenance["measured_reduction_s"]
    assert measured["param044"] == [pytest.approx(14441e-6)]  # the 2,097,152-float aux fc weight
    assert profile.provenance["reduction"].startswith("per-tensor")


def test_bcaffe_eight_node_log_reduces_weight_and_bias_together(tmp_path, capsys):
    out = tmp_path / "g8.json"
    assert run(["import", "bcaffe", BCAFFE / "tmp8comm.log", "-o", out], capsys)[0] == 0
    profile = load_profile(out)
    assert profile.provenance["workers"] == 8
    assert profile.provenance["reduction"].startswith("per-layer")
    assert profile.provenance["measured_reduction_s"]["param000"] == [pytest.approx(1169e-6), pytest.approx(1231e-6)]
    assert "param001" not in profile.provenance["measured_reduction_s"]


def test_osu_tables_become_a_network_file_used_by_predict(tmp_path, capsys):
    net = tmp_path / "net.json"
    tables = [BCAFFE / f"allreduce{n}.log" for n in (2, 4, 8)]
    code, out, err = run(["import", "osu", *tables, "-o", net], capsys)
    assert code == 0, err
    network = load_network(net)
    assert set(network.allreduce) == {"2", "4", "8"}
    for n in ("2", "4", "8"):
        points = [p for p in network.points if p.workers == int(n)]
        assert len(points) == 266 and points[0].bytes == 4
    assert [p.median_s for p in network.points if p.workers == 2][0] == pytest.approx(31.92e-6)
    two = network.allreduce["2"]
    assert network.p2p.alpha_s == pytest.approx(two.alpha_s / 2)
    assert network.p2p.beta_s_per_byte == two.beta_s_per_byte
    # More workers, slower all-reduce per byte (the measured 10GbE cluster).
    betas = [network.allreduce[n].beta_s_per_byte for n in ("2", "4", "8")]
    assert betas == sorted(betas)
    profile = tmp_path / "g4.json"
    assert run(["import", "bcaffe", BCAFFE / "tmp4comm.log", "-o", profile], capsys)[0] == 0
    code, out, err = run(["predict", profile, "--network", net, "--workers", "1,4", "--grouping", "per-tensor",
                          "--method", "fine"], capsys)
    assert code == 0, err
    assert "samples/s" in out


def test_bcaffe_and_osu_bad_inputs(tmp_path, capsys):
    out = tmp_path / "x.json"
    assert_user_error(["import", "bcaffe", tmp_path / "tmp2comm.log", "-o", out], capsys, out, "does not exist")
    setup_only = tmp_path / "tmp2comm.log"
    setup_only.write_text("".join(line + "\n" for line in (BCAFFE / "tmp2comm.log").read_text().splitlines()[:128]))
    assert_user_error(["import", "bcaffe", setup_only, "-o", out], capsys, out, "every compute time is 0")
    binary = tmp_path / "tmp4comm.log"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert_user_error(["import", "bcaffe", binary, "-o", out], capsys, out, "cannot read")
    assert_user_error(["import", "bcaffe", tmp_path, "-o", out], capsys, out, "cannot read")
    plain = tmp_path / "notes8.txt"
    plain.write_text("nothing here\n")
    assert_user_error(["import", "bcaffe", plain, "-o", out], capsys, out, "no B-Caffe per-tensor lines")

    broken = tmp_path / "allreduce4.log"
    broken.write_text("# OSU\n4 54.5\n8 oops\n")
    assert_user_error(["import", "osu", BCAFFE / "allreduce2.log", broken, "-o", out], capsys, out, "line 3")
    assert_user_error(["import", "osu", BCAFFE / "allreduce4.log", "-o", out], capsys, out, "allreduce2.log")
    unnamed = tmp_path / "latency.txt"
    unnamed.write_text("4 54.5\n8 50.3\n")
    assert_user_error(["import", "osu", BCAFFE / "allreduce2.log", unnamed, "-o", out], capsys, out, "allreduce<N>.log")


def test_tied_weights_and_residual_blocks_import_with_the_profilers_structure(tmp_path, capsys):
    """GPT-2's LM head shares the embedding's weight (a layer with no tensors of its own) and
    ResNet's blocks add in place: layers, tensors and gradient order still match `sgdscale profile`."""
    pytest.importorskip("torch")
    from sgdscale.profiling.profiler import profile_workload
    from sgdscale.profiling.zoo import build_workload

    for model, options, batch in (("gpt2", {"layers": 1, "hidden": 32, "heads": 2, "vocab": 50, "seq_len": 8}, 4),
                                  ("resnet18", {"image_size": 32}, 4)):
        info = tmp_path / f"{model}.info.json"
        opts = []
        for key, value in options.items():
            opts += (["--image-size", value] if key == "image_size" else
                     ["--seq-len", value] if key == "seq_len" else ["--option", f"{key}={value}"])
        assert run(["import", "model-info", model, "-o", info, *opts], capsys)[0] == 0
        workload = build_workload(model, **options)
        trace = tmp_path / f"{model}.trace.json"
        _record_call(workload, batch, trace)
        out = tmp_path / f"{model}.json"
        code, _, err = run(["import", "kineto", trace, "--model-info", info, "--batch-size", batch, "-o", out], capsys)
        assert code == 0, err
        imported = load_profile(out)
        own = profile_workload(workload, batch, warmup=1, iterations=2, threads=1)
        assert [(layer.name, [t.name for t in layer.params]) for layer in imported.layers] == \
            [(layer.name, [t.name for t in layer.params]) for layer in own.layers]
        assert imported.gradient_bytes == own.gradient_bytes
        order = lambda p: sorted(p.tensors, key=lambda t: t.grad_ready_s)[-1].name  # noqa: E731
        assert order(imported) == order(own)  # the last gradient (the tied embedding's for gpt2)
        if model == "gpt2":
            assert next(layer for layer in imported.layers if layer.name == "lm_head").params == []


def _record_call(workload, batch_size: int, path: Path) -> None:
    """Like `_record`, for models whose batch is a dict or tuple of inputs."""
    torch = pytest.importorskip("torch")
    from sgdscale.profiling.profiler import _call

    optimizer = torch.optim.SGD(workload.module.parameters(), lr=1e-3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True, with_modules=True,
                                record_shapes=True, schedule=torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1),
                                on_trace_ready=lambda prof: prof.export_chrome_trace(str(path))) as prof:
        for _ in range(3):
            x, y = workload.make_batch(batch_size)
            optimizer.zero_grad(set_to_none=True)
            workload.loss_fn(_call(workload.module, x), y).backward()
            optimizer.step()
            prof.step()
