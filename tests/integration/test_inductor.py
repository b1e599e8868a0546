"""torch.compile on CPU tensors through Spine: Inductor with cpu_backend="triton" generates Triton
kernels, which Spine compiles (in Inductor's compile workers too) and runs."""
import os
import subprocess
import sys

import torch
import torch._inductor.config as inductor_config


def model(x, y):
    return torch.nn.functional.gelu(x * 2 + y).sum(dim=1) + x.amax(dim=1)


def test_torch_compile_with_triton_cpu_backend(target):
    torch._dynamo.reset()
    x, y = torch.randn(13, 70), torch.randn(13, 70)
    with inductor_config.patch(cpu_backend="triton"):
        compiled = torch.compile(model)
        torch.testing.assert_close(compiled(x, y), model(x, y), rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()


BY_HAND = """
import sys, torch, triton
import torch._inductor.config as inductor_config
from spine.driver import CPUDriver
from spine.inductor.audit import audit_compiled
triton.runtime.driver.set_active(CPUDriver(target=sys.argv[1]))
inductor_config.cpu_backend = "triton"

def f(a, b, q, k, v):
    return torch.relu(a @ b), torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

a, b = torch.randn(33, 40), torch.randn(40, 17)
q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
for got, expected in zip(torch.compile(f)(a, b, q, k, v), f(a, b, q, k, v)):
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
print(audit_compiled().fallbacks)
"""


def test_matrix_products_go_to_spine_by_themselves_off_the_host(tmp_path):
    """cpu_backend = "triton" and Spine's driver set by hand, no spine.inductor.enable(): for riscv64 the
    matmul and the attention are Spine kernels (ATen's would be x86 code), on the host they stay ATen's.
    Both compile into one Inductor cache: the riscv64 graph must not be served to the host, nor back."""
    script = tmp_path / "by_hand.py"
    script.write_text(BY_HAND)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    fallbacks = {}
    for target in ("riscv64", "host", "riscv64"):
        done = subprocess.run([sys.executable, str(script), target], capture_output=True, text=True,
                              env=dict(env, SPINE_TARGET=target), timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        fallbacks[target] = done.stdout.strip().splitlines()[-1]
    assert fallbacks["riscv64"] == "[]"
    assert "extern_kernels.mm" in fallbacks["host"] and "attention" in fallbacks["host"]
