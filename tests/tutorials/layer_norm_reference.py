"""Tutorial 05 (layer norm) as written stops at its fp16 check of the bias gradient, which compares with
torch's own CPU fp16 backward. This runs the tutorial, expects that stop, and then judges both against a
float64 reference on the same inputs, with the tutorial's tolerance: Spine's results must be within it,
torch's db is not. Then the tutorial's benchmark, which the stop skipped.

    python tests/tutorials/layer_norm_reference.py 05-layer-norm.py [TARGET]    (host, the default, or riscv64)
"""
import sys
import traceback

from run_tutorial import prepare

ATOL = 1e-2     # the tutorial's


def main() -> None:
    path, target = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "host")
    prepare(path, target)
    import torch
    names = {"__name__": "__main__", "__file__": path}
    with open(path) as f:
        code = compile(f.read(), path, "exec")
    try:
        exec(code, names)
    except AssertionError:
        line = traceback.extract_tb(sys.exc_info()[2])[-1].line
        assert "db_tri, db_ref" in line or "dw_tri, dw_ref" in line, line
    else:
        print("the tutorial's checks passed as written")
    layer_norm = names["layer_norm"]
    torch.manual_seed(0)
    M, N, eps = 1151, 8192, 1e-5
    weight = torch.rand(N, dtype=torch.float16, requires_grad=True)
    bias = torch.rand(N, dtype=torch.float16, requires_grad=True)
    x = (-2.3 + 0.5 * torch.randn(M, N, dtype=torch.float16)).requires_grad_(True)
    dy = .1 * torch.randn_like(x)
    results = {}
    for name, run in (("spine", lambda: layer_norm(x, (N,), weight, bias, eps)),
                      ("torch fp16", lambda: torch.nn.functional.layer_norm(x, (N,), weight, bias, eps))):
        y = run()
        y.backward(dy)
        results[name] = [y.detach().clone()] + [t.grad.clone() for t in (x, weight, bias)]
        x.grad = weight.grad = bias.grad = None
    x64, w64, b64 = (t.detach().double().requires_grad_(True) for t in (x, weight, bias))
    y64 = torch.nn.functional.layer_norm(x64, (N,), w64, b64, eps)
    y64.backward(dy.double())
    exact = [y64.detach(), x64.grad, w64.grad, b64.grad]
    for name, values in results.items():
        errors = {part: (value.double() - reference).abs().max().item()
                  for part, value, reference in zip(("y", "dx", "dw", "db"), values, exact)}
        print(name, "against float64:", ", ".join(f"{part} {error:.4f}" for part, error in errors.items()))
        if name == "spine":
            assert all(error <= ATOL for error in errors.values()), errors
        else:
            assert max(errors.values()) > ATOL, errors     # the reason the tutorial stops
    names["bench_layer_norm"].run(print_data=True)


if __name__ == "__main__":
    main()
